package decide_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

const signer = "system:serviceaccount:webhook-guard-system:webhook-guard"

// stepCase is one configuration of two Bypass targets (openAfter 3,
// closeAfter 2, probed every second) and what NextStep makes of it.
type stepCase struct {
	record, armed circuit.Record
	unreadable    bool
	evidence      map[string]decide.Evidence
	memory        func(now time.Time) decide.Memory
	marking       decide.Marking
	want          decide.StepKind
	why           decide.WaitReason
	after         time.Duration
	check         func(t *testing.T, s decide.Step)
}

// TestNextStep covers every kind of step: each write, each wait, and the
// arming around an opening, from evidence, memory and marking alone.
func TestNextStep(t *testing.T) {
	failing := func(a, b int) map[string]decide.Evidence {
		return map[string]decide.Evidence{
			breakertest.WhA: {Probe: breakertest.Failing(a, probe.ReasonTimeout)},
			breakertest.WhB: {Probe: breakertest.Failing(b, probe.ReasonTimeout)},
		}
	}
	mine := func() circuit.Entry {
		e := breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)
		e.By = signer
		return e
	}
	mutating := decide.Marking{On: true}
	bound := circuit.DisarmAfter // the marking bound: more than one interval
	for name, tc := range map[string]stepCase{
		"healthy: nothing to change": {
			evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(5)}},
			want:     decide.StepWait, why: decide.WaitNothing,
		},
		"an unreadable record: nothing changes": {
			unreadable: true, evidence: failing(3, 0),
			want: decide.StepWait, why: decide.WaitUnreadable,
			check: func(t *testing.T, s decide.Step) { assert.Error(t, s.Err) },
		},
		"no marking (validating): the opening is written at once": {
			evidence: failing(3, 0),
			want:     decide.StepWrite,
			check: func(t *testing.T, s decide.Step) {
				assert.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Opened}, breakertest.Kinds(s.Changes))
			},
		},
		"a sibling one failure away: the opening waits one interval for it": {
			evidence: failing(3, 2),
			want:     decide.StepWait, why: decide.WaitSibling, after: time.Second,
			check: func(t *testing.T, s decide.Step) { assert.Equal(t, 1, s.Coalesced) },
		},
		"marking: a sibling one failure away, and both are armed meanwhile": {
			evidence: failing(3, 2), marking: mutating,
			want: decide.StepArm, after: time.Second,
			check: func(t *testing.T, s decide.Step) {
				assert.Equal(t, []string{breakertest.WhA, breakertest.WhB}, armedOf(t, s))
			},
		},
		"marking: an opening not armed yet is armed first": {
			evidence: failing(3, 0), marking: mutating,
			want: decide.StepArm, after: decide.MarkingPoll,
			check: func(t *testing.T, s decide.Step) {
				assert.Equal(t, []string{breakertest.WhA}, armedOf(t, s))
				assert.Empty(t, recordOf(t, s), "the arming write opens nothing")
			},
		},
		"marking: armed, and no canary asked yet": {
			evidence: failing(3, 0), marking: mutating, armed: circuit.Record{breakertest.WhA: mine()},
			want: decide.StepWait, why: decide.WaitCanary,
			check: func(t *testing.T, s decide.Step) {
				assert.Equal(t, []string{breakertest.WhA}, s.Ask)
				assert.Equal(t, bound, s.AskTimeout)
			},
		},
		"marking: armed, and the canary does not show it yet": {
			evidence: failing(3, 0), marking: decide.Marking{On: true, Asked: true}, armed: circuit.Record{breakertest.WhA: mine()},
			want: decide.StepWait, why: decide.WaitMarking, after: decide.MarkingPoll,
		},
		"marking: armed and shown, it opens, and its record entry arms it": {
			evidence: failing(3, 0), marking: mutating, armed: circuit.Record{breakertest.WhA: mine()},
			memory: func(time.Time) decide.Memory {
				return decide.Memory{UID: breakertest.UID, Shown: map[string]bool{breakertest.WhA: true}}
			},
			want: decide.StepWrite,
			check: func(t *testing.T, s decide.Step) {
				assert.Equal(t, []string{breakertest.WhA}, recordOf(t, s))
				assert.Empty(t, armedOf(t, s))
				assert.Empty(t, s.Unconfirmed)
			},
		},
		"marking: a policy not in place is reported once, and the opening waits": {
			evidence: failing(3, 0), marking: decide.Marking{On: true, Policies: map[string]string{breakertest.WhA: "not installed"}},
			want: decide.StepWait, why: decide.WaitMarking, after: decide.MarkingPoll,
			check: func(t *testing.T, s decide.Step) {
				assert.Equal(t, map[string]string{breakertest.WhA: "not installed"}, s.MarkingFailed)
			},
		},
		"marking: an opening that waited out its bound goes unconfirmed": {
			evidence: failing(3, 0), marking: decide.Marking{On: true, Policies: map[string]string{breakertest.WhA: "not installed"}},
			memory: func(now time.Time) decide.Memory {
				return decide.Memory{UID: breakertest.UID, Waits: map[string]decide.MarkingWait{
					breakertest.WhA: {Since: now.Add(-bound), Seen: now.Add(-decide.MarkingPoll)}}}
			},
			want: decide.StepWrite,
			check: func(t *testing.T, s decide.Step) {
				assert.Equal(t, map[string]string{breakertest.WhA: "not installed"}, s.Unconfirmed)
				require.Len(t, s.Changes, 1)
				assert.Contains(t, s.Changes[0].Message, "; marking not confirmed: not installed")
				assert.Empty(t, s.MarkingFailed, "reported when the wait began")
			},
		},
		"marking: one failure from the threshold, armed ahead in a write with no transition": {
			evidence: failing(2, 0), marking: mutating,
			want: decide.StepWrite, after: time.Second,
			check: func(t *testing.T, s decide.Step) {
				assert.Empty(t, s.Changes)
				assert.Equal(t, []string{breakertest.WhA}, armedOf(t, s))
			},
		},
		"a closing stays armed for circuit.DisarmAfter": {
			evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(2)}}, marking: mutating,
			record: circuit.Record{breakertest.WhA: mine()},
			want:   decide.StepWrite, after: circuit.DisarmAfter,
			check: func(t *testing.T, s decide.Step) {
				assert.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Closed}, breakertest.Kinds(s.Changes))
				assert.Equal(t, []string{breakertest.WhA}, armedOf(t, s))
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, in := tc.snapshot(t)
			var mem decide.Memory
			if tc.memory != nil {
				mem = tc.memory(in.Now)
			}
			before := deepCopy(mem)
			step, err := decide.NextStep(s, in, mem, tc.marking)
			require.NoError(t, err)
			assert.Equal(t, tc.want, step.Kind)
			assert.Equal(t, tc.why, step.Why)
			assert.Equal(t, tc.after, step.After)
			assert.Equal(t, before, mem, "NextStep changes no memory it is given")
			if tc.check != nil {
				tc.check(t, step)
			}
		})
	}
}

func (tc stepCase) snapshot(t *testing.T) (decide.Snapshot, decide.Inputs) {
	t.Helper()
	cur := breakertest.WithEntries(t, breakertest.Config(
		breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail), breakertest.Webhook(breakertest.WhB, breakertest.PolicyFail)), tc.record)
	if tc.record != nil {
		cur.Webhooks[0] = breakertest.Webhook(breakertest.WhA, breakertest.PolicyIgnore, breakertest.BypassMarker())
	}
	var err error
	cur.Annotations, err = circuit.EncodeArming(cur.Annotations, tc.armed)
	require.NoError(t, err)
	if tc.unreadable {
		cur.Annotations[circuit.Annotation] = "{"
	}
	var targets []config.Target
	for _, hook := range []string{breakertest.WhA, breakertest.WhB} {
		tgt := breakertest.Target(hook, config.ModeBypass, 3, 2)
		tgt.Probe.Interval = time.Second
		targets = append(targets, tgt)
	}
	return decide.Read(cur), decide.Inputs{Targets: targets, Evidence: tc.evidence, Now: breakertest.Now, Signer: signer}
}

func armedOf(t *testing.T, s decide.Step) []string { return webhooksOf(t, s, circuit.DecodeArming) }

func recordOf(t *testing.T, s decide.Step) []string { return webhooksOf(t, s, circuit.Decode) }

// webhooksOf are the webhooks of the entries decode reads from s.Next.
func webhooksOf(t *testing.T, s decide.Step, decode func(map[string]string) (circuit.Record, error)) []string {
	t.Helper()
	require.NotNil(t, s.Next)
	rec, err := decode(s.Next.Annotations)
	require.NoError(t, err)
	return rec.Webhooks()
}

func deepCopy(m decide.Memory) decide.Memory {
	out := m
	out.ArmedSince, out.Shown, out.Waits = clone(m.ArmedSince), clone(m.Shown), clone(m.Waits)
	return out
}

func clone[V any](m map[string]V) map[string]V {
	if m == nil {
		return nil
	}
	out := map[string]V{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// A canary's answer is kept in the memory: what it showed holds, and a
// failure stops the next canary for a bound.
func TestMemory_CanaryAnswered(t *testing.T) {
	now := breakertest.Now
	m := decide.Memory{}.CanaryAnswered(breakertest.UID, []string{breakertest.WhA, breakertest.WhB}, []string{breakertest.WhB}, nil, now)
	assert.Equal(t, map[string]bool{breakertest.WhA: true}, m.Shown)
	failed := m.CanaryAnswered(breakertest.UID, []string{breakertest.WhB}, nil, errors.New("refused"), now)
	assert.Equal(t, decide.CanaryFailure{At: now, Err: "refused"}, failed.CanaryFailure)
	assert.Equal(t, map[string]bool{breakertest.WhA: true}, failed.Shown, "a failed canary shows nothing")
	assert.Empty(t, decide.Memory{UID: breakertest.OtherUID, Shown: map[string]bool{breakertest.WhA: true}}.
		CanaryAnswered(breakertest.UID, nil, nil, nil, now).Shown, "another incarnation's memory is forgotten")
}
