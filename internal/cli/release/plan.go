package release

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// Line is what releasing one webhook does (or did): one line of output.
type Line struct {
	// Kind and Configuration name the webhook configuration.
	Kind          circuit.Kind
	Configuration string
	// Webhook is the webhook's name.
	Webhook string
	// Changes are what is handed back, in order, for people: for example
	// "failurePolicy Ignore -> Fail". Empty when there is nothing to
	// release.
	Changes []string
	// Note says why nothing, or not everything, is handed back: the
	// circuit is closed, the configuration is missing or handed off.
	Note string
}

// String is the line as "guard release" prints it.
func (l Line) String() string {
	s := fmt.Sprintf("%s/%s %s:", l.Kind.Singular(), l.Configuration, l.Webhook)
	if len(l.Changes) > 0 {
		s += " released (" + strings.Join(l.Changes, ", ") + ")"
	}
	if l.Note != "" {
		s += " " + l.Note
	}
	return s
}

// Plan is what releasing one configuration takes.
type Plan struct {
	// Lines are one per webhook: every webhook asked for, then every other
	// webhook with an entry of this installation, in the configuration's
	// order (webhooks no longer in it last, by name).
	Lines []Line
	// Next is the configuration, seen as circuit.View, with everything of
	// this installation's handed back; nil when there is nothing to write.
	// Its marking stays armed: the record entries it removes move to the
	// arming entries, as a closing's do.
	Next *admissionregistrationv1.MutatingWebhookConfiguration
	// Disarm are the webhooks whose arming entries of this installation
	// Next keeps: a later write removes them (PlanDisarm),
	// circuit.DisarmAfter after Next is written, once every kube-apiserver
	// calls the webhooks again.
	Disarm []string
	// Notes are what the plan does to the configuration as a whole, one
	// line each: unreadable arming entries it removes.
	Notes []string
}

// disarmLater is the change of a webhook whose marking stays armed in the
// restoring write, and is disarmed in a later one.
var disarmLater = fmt.Sprintf("arming entry removed %s later", circuit.DisarmAfter)

// releaseOrder is the webhooks to release (every one with an entry of
// signer's in rec or armed, when webhooks is nil) in the configuration's
// order, those no longer in it last by name.
func releaseOrder(view *admissionregistrationv1.MutatingWebhookConfiguration, signer string, webhooks []string, rec, armed circuit.Record) []string {
	selected := webhooks
	if selected == nil {
		for _, r := range []circuit.Record{rec, armed} {
			for _, hook := range r.Webhooks() {
				if _, ok := r.Mine(hook, signer); ok && !slices.Contains(selected, hook) {
					selected = append(selected, hook)
				}
			}
		}
	}
	index := func(hook string) int { return circuit.WebhookIndex(view, hook) }
	ordered := slices.Clone(selected)
	slices.SortStableFunc(ordered, func(a, b string) int {
		ia, ib := index(a), index(b)
		switch {
		case ia < 0 && ib < 0:
			return strings.Compare(a, b)
		case ia < 0:
			return 1
		case ib < 0:
			return -1
		}
		return ia - ib
	})
	return ordered
}

// nothingToRelease says why hook, which has no entry of this
// installation's, has nothing to release.
func nothingToRelease(rec circuit.Record, hook string, present bool) string {
	switch e, ok := rec[hook]; {
	case ok:
		return fmt.Sprintf("nothing to release (its circuit was opened by another installation, %s)", e.By)
	case !present:
		return "nothing to release (the webhook is not in the configuration)"
	}
	return "nothing to release (circuit closed)"
}

// PlanRelease computes what releasing view (a configuration of kind, as
// circuit.View shows it) takes, for the installation that signs its
// entries with signer. webhooks are the webhooks to release; nil means
// every webhook with an entry of this installation. It changes nothing.
//
// For each released webhook with an entry of this installation in the
// record: the failurePolicy goes back to the entry's
// originalFailurePolicy (null: the field is removed, as it was unset),
// the bypass matchCondition is removed, and so is the entry. An entry
// whose UID is not the configuration's is a stale copy (the configuration
// was recreated with its annotations): the entry goes, the fields stay,
// for the breaker did not change them. The webhook's marking stays armed
// in that write, as after a closing: a mutating webhook's record entry
// moves to the arming
// entries, and this installation's arming entries go in a later write
// (Plan.Disarm), for an object created while kube-apiserver's webhook
// dispatcher still skips the webhook must still be marked. Unreadable
// arming entries are no arming, as the breaker reads them: they go.
// Entries of other installations, and their fields, are left alone.
//
// On a configuration handed to its administrators (a non-empty override
// annotation) the same holds: each entry keeps its original until a write
// puts it back, and the release is that write. A handed-off entry copied
// from another configuration stays: only an administrator may drop it.
func PlanRelease(kind circuit.Kind, view *admissionregistrationv1.MutatingWebhookConfiguration, signer string, webhooks []string) (Plan, error) {
	rec, err := circuit.Decode(view.Annotations)
	if err != nil {
		return Plan{}, err
	}
	plan := Plan{}
	changed := false
	armed, err := circuit.DecodeArming(view.Annotations)
	if err != nil {
		// Only the breaker writes them, and they only arm marking: the
		// breaker would rewrite them, and so does the release.
		armed = circuit.Record{}
		changed = true
		plan.Notes = append(plan.Notes, fmt.Sprintf("%s/%s: unreadable arming entries removed (%v)", kind.Singular(), view.Name, err))
	}
	override := view.Annotations[circuit.OverrideAnnotation]
	next := view.DeepCopy()

	mine := func(r circuit.Record, hook string) (circuit.Entry, bool) { return r.Mine(hook, signer) }
	ordered := releaseOrder(view, signer, webhooks, rec, armed)

	for _, hook := range ordered {
		line := Line{Kind: kind, Configuration: view.Name, Webhook: hook}
		i := circuit.WebhookIndex(next, hook)
		entry, open := mine(rec, hook)
		switch {
		case open && entry.UID != view.UID && entry.HandedOff():
			// Copied from another configuration: its original is not
			// this one's, and only an administrator may drop it.
			open = false
			line.Note = fmt.Sprintf("nothing to release (a handed-off entry copied from a configuration with UID %s: only an administrator may remove it, see docs/operating.md)", entry.UID)
		case open && entry.UID != view.UID:
			line.Changes = append(line.Changes, "stale record entry removed")
			line.Note = fmt.Sprintf("(the entry was copied from a configuration with UID %s: the fields were not changed by this installation here)", entry.UID)
		case open && i < 0:
			line.Changes = append(line.Changes, "record entry removed")
			line.Note = "(the webhook is no longer in the configuration)"
		case open:
			w := &next.Webhooks[i]
			if was, want := circuit.PolicyString(w.FailurePolicy), circuit.PolicyString(entry.OriginalFailurePolicy); was != want {
				line.Changes = append(line.Changes, fmt.Sprintf("failurePolicy %s -> %s", was, want))
			}
			bypassed := circuit.BypassIndex(w) >= 0
			// next is a deep copy of view: restoring writes through
			// nothing view holds.
			circuit.Restore(w, entry)
			if bypassed {
				line.Changes = append(line.Changes, "bypass matchCondition removed")
			}
			line.Changes = append(line.Changes, "record entry removed")
			if override != "" {
				line.Note = fmt.Sprintf("(handed off, override %q: the original the record kept is restored)", override)
			}
		}
		if open {
			delete(rec, hook)
			if kind == circuit.KindMutating && entry.UID == view.UID && i >= 0 {
				armed[hook] = entry
			}
		}
		if _, ok := mine(armed, hook); ok {
			plan.Disarm = append(plan.Disarm, hook)
			line.Changes = append(line.Changes, disarmLater)
		}
		if len(line.Changes) > 0 {
			changed = true
		} else if line.Note == "" {
			line.Note = nothingToRelease(rec, hook, i >= 0)
		}
		plan.Lines = append(plan.Lines, line)
	}
	if !changed {
		return plan, nil
	}
	annotations := maps.Clone(next.Annotations)
	if annotations, err = circuit.Encode(annotations, rec); err != nil {
		return Plan{}, err
	}
	if annotations, err = circuit.EncodeArming(annotations, armed); err != nil {
		return Plan{}, err
	}
	next.Annotations = annotations
	plan.Next = next
	return plan, nil
}

// PlanDisarm returns view (a configuration as circuit.View shows it)
// without the arming entries of webhooks signed by signer, the second
// write of a release (Plan.Disarm); nil when there are none. Unreadable
// arming entries go too.
func PlanDisarm(view *admissionregistrationv1.MutatingWebhookConfiguration, signer string, webhooks []string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	armed, err := circuit.DecodeArming(view.Annotations)
	changed := err != nil
	if err != nil {
		armed = circuit.Record{}
	}
	for _, hook := range webhooks {
		if e, ok := armed[hook]; ok && e.Mine(signer) {
			delete(armed, hook)
			changed = true
		}
	}
	if !changed {
		return nil, nil
	}
	next := view.DeepCopy()
	if next.Annotations, err = circuit.EncodeArming(next.Annotations, armed); err != nil {
		return nil, err
	}
	return next, nil
}

// OverrideReason is the override annotation's value while "guard release"
// writes: it names the command, for whoever sees it between its two
// patches.
const OverrideReason = "guard release: handing the webhooks back before webhook-guard is uninstalled"

// Patches are the JSON patches (RFC 6902) that write a plan as someone
// other than the breaker: the guard policy lets anyone change the owned
// fields of a configuration whose new object carries a non-empty override
// annotation, and anyone remove that annotation alone.
type Patches struct {
	// Restore takes cur to next with the override annotation added (unless
	// cur has one), with cur's resourceVersion as its precondition.
	Restore []byte
	// RemoveOverride removes the override annotation Restore added; nil
	// when cur had one, which stays. Its resourceVersion precondition is
	// the one Restore's answer carries (ResourceVersionPatch).
	RemoveOverride func(resourceVersion string) []byte
}

// PlanPatches returns the patches that write next over cur (both as
// circuit.View shows them).
func PlanPatches(cur, next *admissionregistrationv1.MutatingWebhookConfiguration) (Patches, error) {
	withOverride := next.DeepCopy()
	handedOff := cur.Annotations[circuit.OverrideAnnotation] != ""
	if !handedOff {
		if withOverride.Annotations == nil {
			withOverride.Annotations = map[string]string{}
		}
		withOverride.Annotations[circuit.OverrideAnnotation] = OverrideReason
	}
	restore, err := circuit.Patch(cur, withOverride)
	if err != nil {
		return Patches{}, err
	}
	p := Patches{Restore: restore}
	if !handedOff {
		p.RemoveOverride = removeOverride
	}
	return p, nil
}

// removeOverride is the patch that removes the override annotation alone,
// if the object's resourceVersion is still resourceVersion.
func removeOverride(resourceVersion string) []byte {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"`
	}
	// RFC 6901: "/" in a key is "~1".
	key := strings.ReplaceAll(strings.ReplaceAll(circuit.OverrideAnnotation, "~", "~0"), "/", "~1")
	data, _ := json.Marshal([]op{
		{Op: "replace", Path: "/metadata/resourceVersion", Value: resourceVersion},
		{Op: "remove", Path: "/metadata/annotations/" + key},
	})
	return data
}
