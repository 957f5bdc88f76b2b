package decide

import (
	"fmt"
	"maps"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// ChangeKind names a change the breaker makes to one webhook.
type ChangeKind string

const (
	// Opened: the circuit opened; the mode's changes are in place.
	Opened ChangeKind = "CircuitOpened"
	// Closed: the circuit closed; the original fields are back.
	Closed ChangeKind = "CircuitClosed"
	// HandedOff: the override annotation appeared; the breaker removed its
	// entry and bypass marker and kept the failurePolicy that is there now.
	HandedOff ChangeKind = "HandedOff"
	// DroppedStale: the entry belonged to another incarnation of the
	// configuration (another UID) or to a webhook that no longer exists.
	DroppedStale ChangeKind = "StaleRecordDropped"
	// Overwritten: someone changed the owned fields despite the guard
	// (while its policy was missing, or before the apiserver enforced it).
	// Their values stand, the entry goes, and they become the baseline.
	Overwritten ChangeKind = "OwnedFieldsOverwritten"
)

// TakenOver is the Event reason of a Takeover. It is not a ChangeKind:
// a takeover moves no circuit, it changes who closes it.
const TakenOver = "CircuitTakenOver"

// Takeover is one entry TakeOver signed anew.
type Takeover struct {
	// Webhook is the entry's webhook.
	Webhook string
	// From is the identity that signed it before.
	From string
	// Message explains the takeover for an Event.
	Message string
}

// Change is one webhook's transition in a Plan.
type Change struct {
	Webhook string
	Kind    ChangeKind
	// Message explains the change for an Event.
	Message string
	// Signal is what opened the circuit, for Opened.
	Signal string
}

// Evidence is what the breaker knows of one target when it decides.
type Evidence struct {
	// Probe are the direct probe's consecutive outcomes.
	Probe Counts
	// APIServer are the apiserver signal's consecutive observations.
	APIServer Counts
	// Path is the path probe's evidence.
	Path Path
	// Admitted is how many requests the apiserver admitted without the
	// webhook while its circuit was open, for the closing Event.
	Admitted float64
	// Marked is how many objects the circuit's marking policy marked while
	// it was open, for the closing Event.
	Marked float64
	// MinOpen is how long a Bypass circuit opened by the apiserver signal
	// stays open at least (config MinOpen, doubled per reopening while the
	// apiserver's calls keep failing).
	MinOpen time.Duration
	// Damp is how long a circuit that re-opened soon after its last close
	// stays open at least (flap damping, Damp).
	Damp time.Duration
	// Unprobeable, when set, is why the target can no longer be probed
	// (for example sideEffects changed to Some). An open circuit on such a
	// target is closed: nothing could ever close it otherwise. The other
	// fields are then not read.
	Unprobeable string
}

// Inputs are what Plan decides from, besides the object.
type Inputs struct {
	// Targets are the approved webhooks of this configuration.
	Targets []config.Target
	// Evidence is what is known of each target, keyed by webhook name. A
	// target without evidence stays as it is.
	Evidence map[string]Evidence
	// Now stamps new record entries.
	Now time.Time
	// Signer signs new entries (see ConfigurationReconciler.Signer); entries
	// signed by another belong to another installation and are left alone.
	Signer string
	// HoldOpen stops every opening (closes still happen): every probed
	// target of the service is failing at once (State.Inputs).
	HoldOpen bool
	// Wait holds back the openings of these webhooks: their marking is
	// not armed yet (the arming hold of NextStep).
	Wait map[string]bool
	// Only, when set, limits the decisions about targets to this webhook;
	// the others stay as they are. The reconciler uses it to write
	// transitions one by one after the apiserver refused them together.
	Only string
}

// Plan computes the configuration the breaker wants from the current one.
// It never opens a circuit of a target in Observe mode (config.ModeObserve),
// and closes one left open from an earlier mode.
// It returns a modified deep copy and the changes it made; no changes
// means no write, and then the result is cur itself (it copies in full
// only what it changes). Plan is pure: the reconciler writes its result,
// through NextStep, in one JSON patch, so the record and the policy change
// together or not at all.
func Plan(cur *circuit.ConfigView, in Inputs) (*circuit.ConfigView, []Change, error) {
	next, _, changes, err := plan(Read(cur), in)
	return next, changes, err
}

// plan is Plan on a snapshot: it also returns the record next carries.
func plan(s Snapshot, in Inputs) (*circuit.ConfigView, circuit.Record, []Change, error) {
	cur := s.View
	if s.RecordErr != nil {
		if reason := cur.Annotations[circuit.OverrideAnnotation]; reason != "" {
			next, changes, err := handOffUnreadable(cur, reason)
			return next, circuit.Record{}, changes, err
		}
		// Nothing about what the breaker changed can be known: it changes
		// nothing, never takes the current Ignore as a baseline, and the
		// reconciler reports the record.
		return nil, nil, nil, s.RecordErr
	}
	rec := maps.Clone(s.Record)
	next := planCopy(cur)
	var changes []Change
	if reason := cur.Annotations[circuit.OverrideAnnotation]; reason != "" {
		changes = handOff(next, rec, in.Signer, reason, in.Now)
	} else {
		changes = settleRecord(cur, next, rec, in)
		for _, t := range in.Targets {
			if c := transition(cur, next, rec, t, in); c != nil {
				changes = append(changes, *c)
			}
		}
	}
	next, changes, err := finish(cur, next, rec, changes)
	return next, rec, changes, err
}

// handOff releases every circuit of this installation in rec to the
// administrator who set the override annotation (reason): the bypass
// markers go, failurePolicy stays as it is, and each entry stays, marked
// handed off at now, with its original: an original leaves the
// configuration only in the write that puts it back. An entry already
// handed off is left as it is.
func handOff(next *circuit.ConfigView, rec circuit.Record, signer, reason string, now time.Time) []Change {
	var changes []Change
	for _, name := range rec.Webhooks() {
		entry := rec[name]
		if !entry.Mine(signer) {
			continue
		}
		wh := circuit.FindWebhook(next, name)
		if entry.HandedOff() && (wh == nil || circuit.BypassIndex(wh) < 0) {
			continue
		}
		stays := "the webhook no longer exists"
		if wh != nil {
			circuit.RemoveBypass(wh)
			stays = fmt.Sprintf("failurePolicy stays %s as it is now", circuit.PolicyString(wh.FailurePolicy))
		}
		if !entry.HandedOff() {
			entry.HandedOffAt = ptr.To(metav1.NewTime(now.UTC().Truncate(time.Second)))
			rec[name] = entry
		}
		changes = append(changes, Change{Webhook: name, Kind: HandedOff, Message: circuit.EventNote(
			"administrator override: webhook-guard released %s (%s) and keeps its hands off this configuration; %s. "+
				"Its record entry keeps the original: remove the annotation %s to hand it back, and webhook-guard restores the original once the webhook is healthy; "+
				"to keep the current value for good, remove the entry while the override is set (docs/operating.md); override reason: %q",
			name, HandOffOriginal(entry), stays, circuit.OverrideAnnotation, reason)})
	}
	return changes
}

// settleRecord drops or closes the entries of rec that no longer hold:
// written for another object (UID), for a webhook that is gone, undone
// by someone else, or of a webhook that is no longer a target or is now
// observed. Another installation's entries are left alone.
func settleRecord(cur, next *circuit.ConfigView, rec circuit.Record, in Inputs) []Change {
	var changes []Change
	targets := map[string]config.Target{}
	for _, t := range in.Targets {
		targets[t.Webhook] = t
	}
	for _, name := range rec.Webhooks() {
		entry := rec[name]
		wh := circuit.FindWebhook(next, name)
		switch {
		case !entry.Mine(in.Signer):
			// Another installation's circuit: not ours to judge.
		case entry.UID != cur.UID && entry.HandedOff():
			// A copy of another configuration's handed-off entry: its
			// original is not this one's to restore, and only an
			// administrator may drop it (the guard keeps it).
		case entry.UID != cur.UID:
			if wh != nil {
				circuit.RemoveBypass(wh)
			}
			delete(rec, name)
			changes = append(changes, Change{Webhook: name, Kind: DroppedStale, Message: fmt.Sprintf(
				"dropped a circuit record for %s written for configuration UID %s, not this one (%s); the current policy is the baseline", name, entry.UID, cur.UID)})
		case wh == nil:
			delete(rec, name)
			changes = append(changes, Change{Webhook: name, Kind: DroppedStale, Message: fmt.Sprintf(
				"dropped the circuit record for %s: the webhook no longer exists in this configuration", name)})
		case entry.HandedOff() && !circuit.InPlace(wh, entry):
			// An administrator changed failurePolicy while the configuration
			// was handed off. Put back to the original, the entry goes in a
			// write that changes nothing else; any other value stays until
			// the breaker restores the original, once the webhook is healthy,
			// or an administrator drops the entry to keep it.
			if circuit.Restored(wh, entry) {
				delete(rec, name)
				changes = append(changes, Change{Webhook: name, Kind: Closed, Message: fmt.Sprintf(
					"the original failurePolicy %s of %s was put back while its configuration was handed off; webhook-guard dropped its record entry (open since %s)",
					circuit.PolicyString(entry.OriginalFailurePolicy), name, entry.OpenedAt.UTC().Format(time.RFC3339))})
			}
		case !circuit.InPlace(wh, entry):
			// Someone changed the breaker's fields despite the guard (while
			// its policy was missing, or before the apiserver enforced it).
			// Only what they changed stands; the breaker's own leftovers go.
			delete(rec, name)
			msg := ""
			if wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Ignore {
				circuit.RemoveBypass(wh)
				msg = fmt.Sprintf("the failurePolicy of %s was changed to %s by someone else while its circuit was open; that value is the new baseline; "+
					"webhook-guard removed its bypass marker and its record", name, circuit.PolicyString(wh.FailurePolicy))
			} else {
				wh.FailurePolicy = entry.OriginalFailurePolicy
				msg = fmt.Sprintf("the bypass marker of %s was removed by someone else while its circuit was open; "+
					"webhook-guard restored the original failurePolicy %s it had set to Ignore, and dropped its record", name, circuit.PolicyString(entry.OriginalFailurePolicy))
			}
			changes = append(changes, Change{Webhook: name, Kind: Overwritten, Message: msg})
		default:
			t, ok := targets[name]
			switch {
			case !ok:
				circuit.Restore(wh, entry)
				delete(rec, name)
				changes = append(changes, Change{Webhook: name, Kind: Closed, Message: fmt.Sprintf(
					"closed the circuit on %s because it is no longer a target; restored failurePolicy %s", name, circuit.PolicyString(entry.OriginalFailurePolicy))})
			case t.Observes():
				// Observe writes nothing, so nothing would ever close it.
				circuit.Restore(wh, entry)
				delete(rec, name)
				changes = append(changes, Change{Webhook: name, Kind: Closed, Message: fmt.Sprintf(
					"closed the circuit on %s because its target is now in Observe mode, which changes nothing; restored failurePolicy %s (open since %s)",
					name, circuit.PolicyString(entry.OriginalFailurePolicy), entry.OpenedAt.UTC().Format(time.RFC3339))})
			}
		}
	}
	return changes
}

// transition is t's transition, applied to next and rec, or nil: what
// want makes of t's evidence.
func transition(cur, next *circuit.ConfigView, rec circuit.Record, t config.Target, in Inputs) *Change {
	kind, signal := want(next, rec, t, in)
	if kind == "" {
		return nil
	}
	wh := circuit.FindWebhook(next, t.Webhook)
	ev := in.Evidence[t.Webhook]
	c := ev.Probe
	entry := rec[t.Webhook]
	switch {
	case kind == Closed && ev.Unprobeable != "":
		circuit.Restore(wh, entry)
		delete(rec, t.Webhook)
		return &Change{Webhook: t.Webhook, Kind: Closed, Message: fmt.Sprintf(
			"closed the circuit on %s because it can no longer be probed (%s), so no probe could ever close it; restored failurePolicy %s (open since %s)",
			t.Webhook, ev.Unprobeable, circuit.PolicyString(entry.OriginalFailurePolicy), entry.OpenedAt.UTC().Format(time.RFC3339))}
	case kind == Opened:
		circuit.OpenWebhook(wh, t.Mode)
		original := cur.Webhooks[circuit.WebhookIndex(cur, t.Webhook)].FailurePolicy
		_, why := OpenedBecause(signal, c, ev.APIServer)
		why += PathNote(signal, ev.Path)
		rec[t.Webhook] = openEntry(cur, t, signal, ev, in)
		return &Change{Webhook: t.Webhook, Kind: Opened, Signal: signal, Message: fmt.Sprintf(
			"opened the circuit on %s in %s mode %s; original failurePolicy %s",
			t.Webhook, t.Mode, why, circuit.PolicyString(original))}
	}
	circuit.Restore(wh, entry)
	delete(rec, t.Webhook)
	because, trial := fmt.Sprintf("after %d consecutive healthy probes", c.Successes), trialNote(t, entry)
	if signal == SignalPath {
		because, trial = PathClosedBecause(ev.Path), ""
	}
	if signal == SignalAPIServer {
		because = fmt.Sprintf("after %d intervals in which the probe could not run (last: %v) while the apiserver's own calls to the webhook succeeded for %d intervals",
			c.Unknowns, UnknownErr(c), ev.APIServer.Successes)
	}
	return &Change{Webhook: t.Webhook, Kind: Closed, Message: fmt.Sprintf(
		"closed the circuit on %s %s; restored failurePolicy %s (open since %s)%s",
		t.Webhook, because, circuit.PolicyString(entry.OriginalFailurePolicy), entry.OpenedAt.UTC().Format(time.RFC3339),
		admittedNote(t, entry, ev, in.Now)+trial)}
}

// openEntry is the record entry of t's circuit opened on cur by signal,
// given its evidence ev.
func openEntry(cur *circuit.ConfigView, t config.Target, signal string, ev Evidence, in Inputs) circuit.Entry {
	reason, _ := OpenedBecause(signal, ev.Probe, ev.APIServer)
	return circuit.Entry{
		UID:                   cur.UID,
		Mode:                  t.Mode,
		OpenedAt:              metav1.NewTime(in.Now.UTC().Truncate(time.Second)),
		Reason:                reason,
		Signal:                signal,
		OriginalFailurePolicy: cur.DeepCopy().Webhooks[circuit.WebhookIndex(cur, t.Webhook)].FailurePolicy,
		By:                    in.Signer,
	}
}

// want is t's transition on view, whose record is rec: Opened, Closed, or
// "" (it stays as it is), with the signal that decides it. It is t's
// evidence in, judged by JudgeTarget, against the holds (the all-fail
// hold, marking not yet armed, a minimum open time, flap damping). It
// changes nothing.
func want(view *circuit.ConfigView, rec circuit.Record, t config.Target, in Inputs) (ChangeKind, string) {
	if in.Only != "" && t.Webhook != in.Only || t.Observes() {
		// Observe targets are judged by State.JudgeObserved, and
		// nothing is written for them.
		return "", ""
	}
	wh := circuit.FindWebhook(view, t.Webhook)
	ev, known := in.Evidence[t.Webhook]
	if wh == nil || !known {
		return "", ""
	}
	entry, open := rec[t.Webhook]
	if open && (!entry.Mine(in.Signer) || entry.UID != view.UID) {
		// Another installation's circuit on the same webhook, or a
		// handed-off entry copied from another configuration.
		return "", ""
	}
	if ev.Unprobeable != "" {
		if open {
			return Closed, ""
		}
		return "", ""
	}
	action, signal := JudgeTarget(open, entry, ev.Probe, ev.APIServer, ev.Path, t)
	switch action {
	case Open:
		switch {
		case in.HoldOpen && signal == SignalProbe:
			return "", "" // the apiserver does not agree that the webhook is down
		case in.Wait[t.Webhook]:
			return "", ""
		case !Opens(wh, t.Mode):
			return "", "" // Ignore is already the administrator's baseline.
		}
		return Opened, signal
	case Close:
		if t.Mode == circuit.ModeBypass && openedByAPIServer(entry) && in.Now.Sub(entry.OpenedAt.Time) < ev.MinOpen {
			return "", "" // the probe cannot see the apiserver's path; wait
		}
		if in.Now.Sub(entry.OpenedAt.Time) < ev.Damp {
			return "", "" // it re-opened soon after its last close: damped
		}
		return Closed, signal
	}
	return "", ""
}

// Opens reports whether opening wh in mode changes it
// (circuit.OpenWebhook): an Ignore that is the administrator's baseline
// in Ignore mode does not.
func Opens(wh *admissionregistrationv1.MutatingWebhook, mode circuit.Mode) bool {
	return wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Ignore ||
		mode == circuit.ModeBypass && circuit.BypassIndex(wh) < 0
}

// TakeOver signs anew, with identity, every entry of cur's record that
// a signer in retired wrote; retired maps each such signer (an identity
// that no longer runs) to why it is taken for gone. Only the record
// changes: the fields the entries describe stay as they are, and from
// then on the breaker of identity closes them, or hands them off, as its
// own. It returns cur itself and nothing taken when there is nothing to
// take over, and an error when the record cannot be read.
func TakeOver(cur *circuit.ConfigView, identity string, retired map[string]string) (*circuit.ConfigView, []Takeover, error) {
	rec, err := circuit.Decode(cur.Annotations)
	if err != nil {
		return nil, nil, err
	}
	var taken []Takeover
	for _, name := range rec.Webhooks() {
		entry := rec[name]
		why, ok := retired[entry.By]
		if !ok || entry.Mine(identity) {
			continue
		}
		taken = append(taken, Takeover{Webhook: name, From: entry.By, Message: circuit.EventNote(
			"webhook-guard %s took over the open circuit on %s from %s, which no longer runs (%s); from now on it closes the circuit as its own (%s)",
			identity, name, entry.By, why, HandOffOriginal(entry))})
		entry.By = identity
		rec[name] = entry
	}
	if len(taken) == 0 {
		return cur, nil, nil
	}
	next := cur.DeepCopy()
	if next.Annotations, err = circuit.Encode(next.Annotations, rec); err != nil {
		return nil, nil, err
	}
	return next, taken, nil
}

// handOffUnreadable hands a configuration whose record cannot be read to
// the administrator who set the override: every bypass marker (the guard
// owns that name on any webhook) goes, failurePolicy stays as it is, and
// the record stays as it is, for the administrator to read and repair:
// the originals it may hold are nobody else's to drop. The override
// always works, whatever the record holds. It returns no changes when no
// webhook carries a marker.
func handOffUnreadable(cur *circuit.ConfigView, reason string) (*circuit.ConfigView, []Change, error) {
	next := cur.DeepCopy()
	removed := false
	for i := range next.Webhooks {
		if circuit.BypassIndex(&next.Webhooks[i]) >= 0 {
			circuit.RemoveBypass(&next.Webhooks[i])
			removed = true
		}
	}
	if !removed {
		return cur, nil, nil
	}
	return next, []Change{{Kind: HandedOff, Message: circuit.EventNote(
		"administrator override: webhook-guard released this configuration, whose circuit record it cannot read, so the original failurePolicy is unknown to it; "+
			"it removed its bypass markers, failurePolicy and the record stay as they are now; repair or remove the record, then remove the annotation %s to hand it back; override reason: %q; the record is: %q",
		circuit.OverrideAnnotation, reason, cur.Annotations[circuit.Annotation])}}, nil
}

// The transitions of a target in Observe mode (config.ModeObserve): what
// the breaker would have written. Nothing is written; they are reported
// as Events and counted in webhook_guard_circuit_transitions_total.
const (
	// WouldOpen: the circuit would have opened.
	WouldOpen ChangeKind = "CircuitWouldOpen"
	// WouldClose: a circuit that would have been open would have closed.
	WouldClose ChangeKind = "CircuitWouldClose"
)
