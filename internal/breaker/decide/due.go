package decide

import (
	"maps"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// ArmAheadAt is the number of consecutive failures at which t's marking
// is armed ahead of its opening (see armAhead): openAfter-1 when that is
// at least 2, so that a single failed probe never arms anything;
// otherwise openAfter, when it opens.
func ArmAheadAt(t config.Target) int {
	if t.OpenAfter >= 3 {
		return t.OpenAfter - 1
	}
	return t.OpenAfter
}

// ArmsAhead reports whether a step on s, given in, would arm marking ahead
// of an opening, held by the all-fail hold (in.HoldOpen) or not: a target of a mutating configuration has ArmAheadAt
// consecutive failures, fewer than openAfter, that kube-apiserver's calls
// do not veto (SlowVetoed), its circuit is closed and its marking is not
// armed.
func ArmsAhead(s Snapshot, in Inputs) bool {
	if s.RecordErr != nil || s.View.Annotations[circuit.OverrideAnnotation] != "" {
		return false
	}
	for _, t := range in.Targets {
		ev := in.Evidence[t.Webhook]
		c := ev.Probe
		if t.Kind != circuit.KindMutating || t.Observes() || c.Failures < ArmAheadAt(t) || c.Failures >= t.OpenAfter ||
			t.APIServerSignal.Enabled && SlowVetoed(c, ev.APIServer) {
			continue
		}
		wh := circuit.FindWebhook(s.View, t.Webhook)
		if _, open := s.Record[t.Webhook]; wh != nil && Opens(wh, t.Mode) && !open && s.Armed[t.Webhook].UID != s.View.UID {
			return true
		}
	}
	return false
}

// Due says what a step on s, given in, could write: it reports whether a
// target would open or close, and whether anything at all is to be done
// (those, a record entry to settle, a handoff, or marking to arm ahead of
// an opening). It is what the probe runner asks after it records
// evidence, to wake the reconciler; it copies nothing unless a record
// entry may need settling. A record that cannot be read is nothing to do
// but a handoff: the reconciler reports it when the object changes.
func Due(s Snapshot, in Inputs) (opening, closing, due bool) {
	if s.RecordErr != nil {
		// Only a handoff changes it (handOffUnreadable).
		if s.View.Annotations[circuit.OverrideAnnotation] == "" {
			return false, false, false
		}
		_, changes, _ := handOffUnreadable(s.View, "")
		return false, false, len(changes) > 0
	}
	if reason := s.View.Annotations[circuit.OverrideAnnotation]; reason != "" {
		return false, false, len(handOff(planCopy(s.View), maps.Clone(s.Record), in.Signer, reason, in.Now)) > 0
	}
	for _, t := range in.Targets {
		switch kind, _ := want(s.View, s.Record, t, in); kind {
		case Opened:
			opening = true
		case Closed:
			closing = true
		}
	}
	if opening || closing {
		return opening, closing, true
	}
	if len(s.Record) > 0 && len(settleRecord(s.View, planCopy(s.View), maps.Clone(s.Record), in)) > 0 {
		return false, false, true
	}
	return false, false, ArmsAhead(s, in)
}
