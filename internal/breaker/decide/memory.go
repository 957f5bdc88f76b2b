package decide

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// Memory is what the reconciler keeps of one configuration from one
// reconcile to the next, for NextStep: times and canary answers that no
// object records. NextStep never changes the Memory it is given; it
// returns the one to keep (Step.Memory).
type Memory struct {
	// UID is the configuration the memory is of: a configuration created
	// anew under the same name starts with an empty memory.
	UID types.UID
	// DecidedAt is the decision time kept while an opening waits
	// (holdDecision): each reconcile meanwhile stamps the same openedAt,
	// which the marking policies armed for it already carry.
	DecidedAt time.Time
	// CoalesceUntil ends the wait of a coalescing for a sibling one probe
	// from its own transition (coalesce).
	CoalesceUntil time.Time
	// ArmedSince holds when each arming entry outside the record was
	// first seen, by webhook (armedAt).
	ArmedSince map[string]time.Time
	// Shown holds the arming entries a canary showed armed, by webhook,
	// until the breaker adds or removes them again (armedNow, forgetArmed).
	Shown map[string]bool
	// Waits holds the openings that wait for marking evidence, by webhook
	// (markingWait).
	Waits map[string]MarkingWait
	// CanaryFailure is the configuration's last failed canary.
	CanaryFailure CanaryFailure
}

// MarkingWait is when an opening was first and last wanted while it
// waited for marking evidence.
type MarkingWait struct{ Since, Seen time.Time }

// CanaryFailure is a failed canary: when, and its error.
type CanaryFailure struct {
	At  time.Time
	Err string
}

// of returns a copy of m that NextStep may change, for the configuration
// of uid.
func (m Memory) of(uid types.UID) Memory {
	if m.UID != uid {
		return Memory{UID: uid, ArmedSince: map[string]time.Time{}, Shown: map[string]bool{}, Waits: map[string]MarkingWait{}}
	}
	m.ArmedSince, m.Shown, m.Waits = cloneOr(m.ArmedSince), cloneOr(m.Shown), cloneOr(m.Waits)
	return m
}

func cloneOr[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return maps.Clone(m)
}

// CanaryAnswered returns m with a canary's answer about asked: those of
// asked not in notYet are shown armed; a failed canary (err) is kept as
// the last failure.
func (m Memory) CanaryAnswered(uid types.UID, asked, notYet []string, err error, now time.Time) Memory {
	m = m.of(uid)
	if err != nil {
		m.CanaryFailure = CanaryFailure{At: now, Err: err.Error()}
		return m
	}
	for _, hook := range asked {
		if !slices.Contains(notYet, hook) {
			m.Shown[hook] = true
		}
	}
	return m
}

// Written returns m after the write of changes: the openings among them
// wait no more, and nothing is held for them.
func (m Memory) Written(changes []Change) Memory {
	m = m.of(m.UID)
	for _, c := range changes {
		if c.Kind == Opened {
			delete(m.Waits, c.Webhook)
		}
	}
	m.DecidedAt = time.Time{}
	if len(changes) > 0 {
		m.CoalesceUntil = time.Time{}
	}
	return m
}

// maxHeldDecision bounds how long an opening keeps its decision time
// while it waits for its marking policies; after that it decides anew.
const maxHeldDecision = time.Minute

// decisionTime is the held decision time, or now.
func (m *Memory) decisionTime(now time.Time) time.Time {
	if !m.DecidedAt.IsZero() && now.Sub(m.DecidedAt) < maxHeldDecision {
		return m.DecidedAt
	}
	return now
}

// holdDecision keeps at as the decision time while an opening waits, for
// at most maxHeldDecision.
func (m *Memory) holdDecision(at time.Time) { m.DecidedAt = at }

// armedAt returns since when the arming entry of hook has been outside
// the record: now when reset (a closing), or when it was not seen yet (a
// restarted breaker starts counting again).
func (m *Memory) armedAt(hook string, now time.Time, reset bool) time.Time {
	if at, ok := m.ArmedSince[hook]; ok && !reset {
		return at
	}
	m.ArmedSince[hook] = now
	return now
}

// armedNow notes now as when the entries of rec, about to be armed,
// were first seen, unless they were seen before: an arming abandoned
// without an opening goes disarmAfter after it was armed. A canary's
// answer about them is forgotten: it may predate their addition.
func (m *Memory) armedNow(rec circuit.Record, now time.Time) {
	for hook := range rec {
		m.armedAt(hook, now, false)
		delete(m.Shown, hook)
	}
}

// forgetArmed forgets hook's arming entry: it moved into the record, or
// it is removed. What a canary showed about it is forgotten too.
func (m *Memory) forgetArmed(hook string) {
	delete(m.ArmedSince, hook)
	delete(m.Shown, hook)
}

// markingWait notes that hook's opening is wanted at now, and returns how
// much longer it may wait for marking evidence (zero or less: it has
// waited bound), and whether this is the first time (first). The wait
// counts from when it was first wanted, or from when its arming entry was
// written ahead of it, whichever is earlier: a canary that failed ahead
// of the threshold is not waited for again. A wait not seen for bound was
// abandoned (the target recovered): the next one starts anew.
func (m *Memory) markingWait(hook string, bound time.Duration, now time.Time) (left time.Duration, first bool) {
	w, ok := m.Waits[hook]
	if !ok || now.Sub(w.Seen) > bound {
		w, first = MarkingWait{Since: now}, true
		if armed, ok := m.ArmedSince[hook]; ok && armed.Before(w.Since) {
			w.Since = armed
		}
	}
	w.Seen = now
	m.Waits[hook] = w
	return bound - now.Sub(w.Since), first
}

// unshown returns the hooks of cs that no canary has shown armed, and
// the last canary failure when it is less than bound old; ask reports
// whether a canary must be sent first (none was sent in this reconcile,
// and none failed within bound). Kube-apiserver's view of an arming entry
// only moves forward, and the memory forgets what a canary showed
// whenever the breaker adds or removes that entry, so what a canary
// showed once holds until then.
func (m *Memory) unshown(cs []string, bound time.Duration, now time.Time, asked bool) (notYet []string, failure string, ask bool) {
	for _, hook := range cs {
		if !m.Shown[hook] {
			notYet = append(notYet, hook)
		}
	}
	switch {
	case len(notYet) == 0:
		return nil, "", false
	case m.CanaryFailure.Err != "" && now.Sub(m.CanaryFailure.At) < bound:
		return notYet, m.CanaryFailure.Err, false
	}
	return notYet, "", !asked
}

// unshownWhy says why an armed opening that asks no canary this time has
// no evidence: the last canary's failure, or that none showed it armed.
func (m *Memory) unshownWhy(bound time.Duration) string {
	if m.CanaryFailure.Err != "" {
		return m.CanaryFailure.Err
	}
	return fmt.Sprintf("kube-apiserver did not show the policy armed within %s", bound)
}
