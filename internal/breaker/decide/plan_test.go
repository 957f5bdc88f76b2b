package decide_test

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

func TestPlan_open_ignoreMode(t *testing.T) {
	cur := breakertest.Config(
		breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail, breakertest.MC("x")),
		breakertest.Webhook(breakertest.WhOther, breakertest.PolicyFail),
	)
	next, changes := breakertest.Plan(t, cur, decide.Inputs{
		Targets:  []config.Target{breakertest.Target(breakertest.WhA, config.ModeIgnore, 3, 5)},
		Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(3, probe.ReasonTimeout)}},
	})

	require.Len(t, changes, 1)
	assert.Equal(t, breakertest.WhA, changes[0].Webhook)
	assert.Equal(t, decide.Opened, changes[0].Kind)
	assert.NotEmpty(t, changes[0].Message)

	want := cur.DeepCopy()
	want.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	assert.Equal(t, want, breakertest.WithoutCircuit(next), "only the failurePolicy of the target and the circuit annotation change")

	raw := next.Annotations[circuit.Annotation]
	assert.Contains(t, raw, `"openedAt":"2025-03-04T04:06:07Z"`, "openedAt is UTC and truncated to seconds")
	rec := breakertest.MustRecord(t, next)
	require.Equal(t, []string{breakertest.WhA}, rec.Webhooks())
	e := rec[breakertest.WhA]
	assert.Equal(t, breakertest.UID, e.UID)
	assert.Equal(t, config.ModeIgnore, e.Mode)
	assert.Equal(t, string(probe.ReasonTimeout), e.Reason)
	assert.True(t, e.OpenedAt.Time.Equal(time.Date(2025, 3, 4, 4, 6, 7, 0, time.UTC)), "openedAt %s", e.OpenedAt)
	require.NotNil(t, e.OriginalFailurePolicy)
	assert.Equal(t, admissionregistrationv1.Fail, *e.OriginalFailurePolicy)
}

// An opening on slow probes alone, which kube-apiserver's calls did not
// veto, says so in its Event; a run with another failure does not.
func TestPlan_open_onSlowProbesSaysTheCallsWereNotSeenSucceeding(t *testing.T) {
	slow := breakertest.FailedResult(probe.ReasonTimeout)
	slow.Slow = true
	slowRun, mixed := decide.Counts{}, breakertest.Failing(1, probe.ReasonRefused)
	for range 3 {
		slowRun.Observe(slow)
		mixed.Observe(slow)
	}
	const note = "each cut at the probe's timeout, shorter than the webhook's timeoutSeconds, while kube-apiserver's own calls were not seen succeeding"
	for name, tc := range map[string]struct {
		probe decide.Counts
		says  bool
	}{
		"slow probes alone": {probe: slowRun, says: true},
		"a refused one too": {probe: mixed},
	} {
		t.Run(name, func(t *testing.T) {
			_, changes := breakertest.Plan(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), decide.Inputs{
				Targets:  []config.Target{breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 5))},
				Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: tc.probe}},
			})
			require.Len(t, changes, 1)
			assert.Equal(t, decide.Opened, changes[0].Kind)
			assert.Equal(t, tc.says, strings.Contains(changes[0].Message, note), changes[0].Message)
		})
	}
}

func TestPlan_open_bypassThenClose_restoresExactly(t *testing.T) {
	cases := map[string]struct {
		policy *admissionregistrationv1.FailurePolicyType
		conds  []admissionregistrationv1.MatchCondition
	}{
		"a Fail webhook with two matchConditions keeps them in order":    {policy: breakertest.PolicyFail, conds: []admissionregistrationv1.MatchCondition{breakertest.MC("x"), breakertest.MC("y")}},
		"a webhook with nil failurePolicy and nil matchConditions":       {policy: nil, conds: nil},
		"a webhook with nil failurePolicy and one matchCondition":        {policy: nil, conds: []admissionregistrationv1.MatchCondition{breakertest.MC("x")}},
		"a Fail webhook without matchConditions":                         {policy: breakertest.PolicyFail},
		"an Ignore baseline gets the marker and keeps Ignore afterwards": {policy: breakertest.PolicyIgnore, conds: []admissionregistrationv1.MatchCondition{breakertest.MC("x")}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cur := breakertest.Config(
				breakertest.Webhook(breakertest.WhOther, breakertest.PolicyFail, breakertest.MC("o")),
				breakertest.Webhook(breakertest.WhA, tc.policy, tc.conds...),
			)
			orig := cur.DeepCopy()
			tgt := []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 2, 3)}

			opened, changes := breakertest.Plan(t, cur, decide.Inputs{Targets: tgt, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(2, probe.ReasonTLS)}}})
			require.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Opened}, breakertest.Kinds(changes))
			wh := circuit.FindWebhook(opened, breakertest.WhA)
			require.NotNil(t, wh)
			assert.Equal(t, breakertest.PolicyIgnore, wh.FailurePolicy)
			require.Len(t, wh.MatchConditions, len(tc.conds)+1)
			assert.Equal(t, breakertest.BypassMarker(), wh.MatchConditions[len(tc.conds)], "the marker is appended at the end")
			if len(tc.conds) > 0 {
				assert.Equal(t, tc.conds, wh.MatchConditions[:len(tc.conds)], "existing matchConditions are untouched")
			}
			assert.Equal(t, orig.Webhooks[0], opened.Webhooks[0], "the other webhook is untouched")
			rec := breakertest.MustRecord(t, opened)
			require.Contains(t, rec, breakertest.WhA)
			assert.Equal(t, config.ModeBypass, rec[breakertest.WhA].Mode)
			assert.Equal(t, tc.policy, rec[breakertest.WhA].OriginalFailurePolicy)
			assert.Equal(t, string(probe.ReasonTLS), rec[breakertest.WhA].Reason)

			// Fewer successes than closeAfter: nothing moves.
			still, changes := breakertest.Plan(t, opened, decide.Inputs{Targets: tgt, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(2)}}})
			assert.Empty(t, changes)
			assert.Equal(t, opened, still)

			closed, changes := breakertest.Plan(t, opened, decide.Inputs{Targets: tgt, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(3)}}})
			require.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Closed}, breakertest.Kinds(changes))
			assert.Equal(t, orig.Webhooks, closed.Webhooks, "every webhook field is restored exactly")
			assert.Equal(t, orig.Annotations, closed.Annotations, "the circuit annotation is gone, the others stay")
			assert.True(t, equality.Semantic.DeepEqual(orig, closed), "the object is back to the original")
			assert.Equal(t, orig, closed)
		})
	}
}

func TestPlan_open_ignoreModeRestoresNilPolicy(t *testing.T) {
	cur := breakertest.Config(breakertest.Webhook(breakertest.WhA, nil))
	cur.Annotations = nil
	orig := cur.DeepCopy()
	tgt := []config.Target{breakertest.Target(breakertest.WhA, config.ModeIgnore, 1, 1)}

	opened, changes := breakertest.Plan(t, cur, decide.Inputs{Targets: tgt, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(1, probe.ReasonNoRoute)}}})
	require.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Opened}, breakertest.Kinds(changes))
	assert.Equal(t, breakertest.PolicyIgnore, opened.Webhooks[0].FailurePolicy)
	assert.Nil(t, opened.Webhooks[0].MatchConditions, "Ignore mode adds no marker")
	require.Contains(t, opened.Annotations, circuit.Annotation, "nil annotations are allocated")
	assert.Nil(t, breakertest.MustRecord(t, opened)[breakertest.WhA].OriginalFailurePolicy)

	closed, changes := breakertest.Plan(t, opened, decide.Inputs{Targets: tgt, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(1)}}})
	require.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Closed}, breakertest.Kinds(changes))
	assert.Nil(t, closed.Webhooks[0].FailurePolicy, "an unset failurePolicy is unset again")
	assert.Equal(t, orig.Webhooks, closed.Webhooks)
	assert.True(t, equality.Semantic.DeepEqual(orig, closed))
}

func TestPlan_open_ignoreBaseline(t *testing.T) {
	t.Run("in Ignore mode the administrator's Ignore is left alone and no entry is written", func(t *testing.T) {
		cur := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyIgnore))
		next, changes := breakertest.Plan(t, cur, decide.Inputs{
			Targets:  []config.Target{breakertest.Target(breakertest.WhA, config.ModeIgnore, 1, 1)},
			Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(5, probe.ReasonTimeout)}},
		})
		assert.Empty(t, changes)
		assert.Equal(t, cur, next)
		assert.NotContains(t, next.Annotations, circuit.Annotation)
	})
	t.Run("in Bypass mode the marker is added and closing removes it and keeps Ignore", func(t *testing.T) {
		cur := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyIgnore))
		orig := cur.DeepCopy()
		tgt := []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2)}
		opened, changes := breakertest.Plan(t, cur, decide.Inputs{Targets: tgt, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(3, probe.ReasonRefused)}}})
		require.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Opened}, breakertest.Kinds(changes))
		assert.Equal(t, []admissionregistrationv1.MatchCondition{breakertest.BypassMarker()}, opened.Webhooks[0].MatchConditions)
		assert.Equal(t, breakertest.PolicyIgnore, opened.Webhooks[0].FailurePolicy)
		e := breakertest.MustRecord(t, opened)[breakertest.WhA]
		assert.Equal(t, breakertest.PolicyIgnore, e.OriginalFailurePolicy)
		assert.Equal(t, config.ModeBypass, e.Mode)

		closed, changes := breakertest.Plan(t, opened, decide.Inputs{Targets: tgt, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(2)}}})
		require.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Closed}, breakertest.Kinds(changes))
		assert.Equal(t, breakertest.PolicyIgnore, closed.Webhooks[0].FailurePolicy)
		assert.Nil(t, closed.Webhooks[0].MatchConditions)
		assert.Equal(t, orig, closed)
	})
}

func TestPlan_noTransition_nextEqualsCur(t *testing.T) {
	closedCfg := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail, breakertest.MC("x")), breakertest.Webhook(breakertest.WhOther, nil))
	openCfg := breakertest.WithEntries(t, closedCfg, circuit.Record{breakertest.WhA: breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)})
	unknownOnly := decide.Counts{}
	unknownOnly.Observe(breakertest.UnknownResult())
	unknownAfterFailures := breakertest.Failing(2, probe.ReasonTimeout)
	unknownAfterFailures.Observe(breakertest.UnknownResult())
	unknownAfterFailures.Observe(breakertest.UnknownResult())

	cases := map[string]struct {
		cur    *admissionregistrationv1.MutatingWebhookConfiguration
		counts map[string]decide.Counts
	}{
		"a closed circuit below the failure threshold":              {cur: closedCfg, counts: map[string]decide.Counts{breakertest.WhA: breakertest.Failing(2, probe.ReasonTimeout)}},
		"a closed circuit with unknowns after failures below":       {cur: closedCfg, counts: map[string]decide.Counts{breakertest.WhA: unknownAfterFailures}},
		"a closed circuit with only unknown probes":                 {cur: closedCfg, counts: map[string]decide.Counts{breakertest.WhA: unknownOnly}},
		"a closed circuit with successes":                           {cur: closedCfg, counts: map[string]decide.Counts{breakertest.WhA: breakertest.Healthy(10)}},
		"an open circuit below the success threshold":               {cur: openCfg, counts: map[string]decide.Counts{breakertest.WhA: breakertest.Healthy(4)}},
		"an open circuit with more failures":                        {cur: openCfg, counts: map[string]decide.Counts{breakertest.WhA: breakertest.Failing(10, probe.ReasonTimeout)}},
		"an open circuit with only unknown probes":                  {cur: openCfg, counts: map[string]decide.Counts{breakertest.WhA: unknownOnly}},
		"a closed target without counts":                            {cur: closedCfg, counts: nil},
		"an open target without counts":                             {cur: openCfg, counts: map[string]decide.Counts{breakertest.WhOther: breakertest.Failing(9, probe.ReasonTLS)}},
		"counts for a webhook that is not a target move nothing":    {cur: closedCfg, counts: map[string]decide.Counts{breakertest.WhOther: breakertest.Failing(9, probe.ReasonTLS)}},
		"counts for a webhook not in the configuration are ignored": {cur: closedCfg, counts: map[string]decide.Counts{breakertest.WhMissing: breakertest.Failing(9, probe.ReasonTLS)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			next, changes, err := decide.Plan(tc.cur, decide.Inputs{
				Targets:  []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 5), breakertest.Target(breakertest.WhMissing, config.ModeIgnore, 1, 1)},
				Evidence: breakertest.Probed(tc.counts),
				Now:      breakertest.Now,
			})
			require.NoError(t, err)
			assert.Empty(t, changes)
			assert.Equal(t, tc.cur, next)
			assert.Same(t, tc.cur, next, "with no changes Plan returns its input: it runs on every probe and copies nothing then")
		})
	}
}

func TestPlan_override_handsOff(t *testing.T) {
	base := breakertest.Config(
		breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail, breakertest.MC("x")),
		breakertest.Webhook(breakertest.WhB, nil),
		breakertest.Webhook(breakertest.WhOther, breakertest.PolicyFail),
	)
	open := breakertest.WithEntries(t, base, circuit.Record{
		breakertest.WhA: breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail),
		breakertest.WhB: breakertest.EntryFor(config.ModeIgnore, nil),
	})
	tgts := []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 1, 1), breakertest.Target(breakertest.WhB, config.ModeIgnore, 1, 1), breakertest.Target(breakertest.WhOther, config.ModeIgnore, 1, 1)}

	t.Run("a non-empty override keeps every entry, marked handed off, removes the marker and keeps Ignore", func(t *testing.T) {
		cur := open.DeepCopy()
		cur.Annotations[circuit.OverrideAnnotation] = "incident 123: hands off"
		next, changes := breakertest.Plan(t, cur, decide.Inputs{
			Targets: tgts, Now: breakertest.Now,
			// Even counts that would close or open do nothing under an override.
			Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(5)}, breakertest.WhB: {Probe: breakertest.Healthy(5)}, breakertest.WhOther: {Probe: breakertest.Failing(5, probe.ReasonTimeout)}},
		})
		assert.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.HandedOff, breakertest.WhB: decide.HandedOff}, breakertest.Kinds(changes))
		for _, c := range changes {
			assert.Contains(t, c.Message, "incident 123")
		}
		handedOff := circuit.Record{}
		for name, e := range breakertest.MustRecord(t, open) {
			e.HandedOffAt = ptr.To(metav1.NewTime(breakertest.Now.UTC().Truncate(time.Second).Local()))
			handedOff[name] = e
		}
		assert.Equal(t, handedOff, breakertest.MustRecord(t, next), "each entry stays, with its original, marked handed off")
		assert.Equal(t, "incident 123: hands off", next.Annotations[circuit.OverrideAnnotation])
		assert.Equal(t, "me", next.Annotations["keep"])

		want := base.DeepCopy()
		var err error
		want.Annotations, err = circuit.Encode(want.Annotations, handedOff)
		require.NoError(t, err)
		want.Annotations[circuit.OverrideAnnotation] = "incident 123: hands off"
		want.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		want.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		assert.Equal(t, want, next, "failurePolicy stays Ignore, the marker is gone, nothing else changes")

		again, changes := breakertest.Plan(t, next, decide.Inputs{Targets: tgts, Now: breakertest.Now.Add(time.Hour)})
		assert.Empty(t, changes, "a handed-off configuration is written once")
		assert.Equal(t, next, again)
	})

	// Handed back: the override is gone and each kept original is the
	// breaker's again. A healthy webhook's circuit closes to its original;
	// a failing one stays open in Ignore, and closes once healthy.
	handedBack := func(t *testing.T) *circuit.ConfigView {
		cur := open.DeepCopy()
		cur.Annotations[circuit.OverrideAnnotation] = "incident 123: hands off"
		next, _ := breakertest.Plan(t, cur, decide.Inputs{Targets: tgts, Now: breakertest.Now})
		back := next.DeepCopy()
		delete(back.Annotations, circuit.OverrideAnnotation)
		return back
	}
	t.Run("handed back while healthy, each circuit closes to its kept original", func(t *testing.T) {
		closed, changes := breakertest.Plan(t, handedBack(t), decide.Inputs{Targets: tgts, Now: breakertest.Now,
			Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(1)}, breakertest.WhB: {Probe: breakertest.Healthy(1)}}})
		assert.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Closed, breakertest.WhB: decide.Closed}, breakertest.Kinds(changes))
		assert.Equal(t, base.Webhooks, closed.Webhooks, "every original is back, byte for byte")
		assert.NotContains(t, closed.Annotations, circuit.Annotation)
	})
	t.Run("handed back while failing, each circuit stays open in Ignore", func(t *testing.T) {
		back := handedBack(t)
		held, changes := breakertest.Plan(t, back, decide.Inputs{Targets: tgts, Now: breakertest.Now,
			Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(5, probe.ReasonTimeout)}, breakertest.WhB: {Probe: breakertest.Failing(5, probe.ReasonTimeout)}}})
		assert.Empty(t, changes)
		assert.Equal(t, back, held)
	})
	t.Run("handed back after an administrator put an original back, only that entry goes", func(t *testing.T) {
		back := handedBack(t)
		back.Webhooks[0].FailurePolicy = breakertest.PolicyFail
		next, changes := breakertest.Plan(t, back, decide.Inputs{Targets: tgts, Now: breakertest.Now})
		assert.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Closed}, breakertest.Kinds(changes))
		assert.NotContains(t, breakertest.MustRecord(t, next), breakertest.WhA)
		assert.Contains(t, breakertest.MustRecord(t, next), breakertest.WhB)
		assert.Equal(t, back.Webhooks, next.Webhooks, "no webhook changes")
	})
	t.Run("handed back with Fail where unset was the original, the entry goes: kube-apiserver stores Fail for unset", func(t *testing.T) {
		back := handedBack(t)
		back.Webhooks[1].FailurePolicy = breakertest.PolicyFail
		next, changes := breakertest.Plan(t, back, decide.Inputs{Targets: tgts, Now: breakertest.Now})
		assert.Equal(t, map[string]decide.ChangeKind{breakertest.WhB: decide.Closed}, breakertest.Kinds(changes))
		assert.Contains(t, breakertest.MustRecord(t, next), breakertest.WhA)
	})
	t.Run("handed back after an administrator set another value, the entry stays until the webhook is healthy", func(t *testing.T) {
		// A Bypass circuit opened over Ignore: its original is Ignore.
		overIgnore := breakertest.WithEntries(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyIgnore)), circuit.Record{
			breakertest.WhA: breakertest.EntryFor(config.ModeBypass, breakertest.PolicyIgnore),
		})
		overIgnore.Annotations[circuit.OverrideAnnotation] = "INC-9"
		targets := []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 1, 1)}
		handed, _ := breakertest.Plan(t, overIgnore, decide.Inputs{Targets: targets, Now: breakertest.Now})
		back := handed.DeepCopy()
		delete(back.Annotations, circuit.OverrideAnnotation)
		back.Webhooks[0].FailurePolicy = breakertest.PolicyFail
		same, changes := breakertest.Plan(t, back, decide.Inputs{Targets: targets, Now: breakertest.Now,
			Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(5, probe.ReasonTimeout)}}})
		assert.Empty(t, changes, "only a write that restores the original removes it")
		assert.Equal(t, back, same)
		closed, changes := breakertest.Plan(t, back, decide.Inputs{Targets: targets, Now: breakertest.Now,
			Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(1)}}})
		assert.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Closed}, breakertest.Kinds(changes))
		assert.Equal(t, breakertest.PolicyIgnore, closed.Webhooks[0].FailurePolicy, "the kept original is restored once healthy")
	})

	t.Run("an override on a configuration without entries changes nothing", func(t *testing.T) {
		cur := base.DeepCopy()
		cur.Annotations[circuit.OverrideAnnotation] = "mine"
		next, changes := breakertest.Plan(t, cur, decide.Inputs{Targets: tgts, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(5, probe.ReasonTimeout)}}})
		assert.Empty(t, changes)
		assert.Equal(t, cur, next, "an overridden configuration is not opened")
	})

	t.Run("an empty override value is not a hand-off", func(t *testing.T) {
		cur := open.DeepCopy()
		cur.Annotations[circuit.OverrideAnnotation] = ""
		next, changes := breakertest.Plan(t, cur, decide.Inputs{Targets: tgts})
		assert.Empty(t, changes)
		assert.Equal(t, cur, next)

		closed, changes := breakertest.Plan(t, cur, decide.Inputs{Targets: tgts, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(1)}}})
		assert.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Closed}, breakertest.Kinds(changes), "the breaker still manages it")
		assert.Equal(t, base.Webhooks[0], closed.Webhooks[0])
	})
}

func TestPlan_staleAndOrphanEntries(t *testing.T) {
	base := breakertest.Config(
		breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail, breakertest.MC("x")),
		breakertest.Webhook(breakertest.WhOther, breakertest.PolicyFail),
	)
	tgts := []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 3)}

	t.Run("an entry with another uid is dropped, the marker removed and the policy kept", func(t *testing.T) {
		stale := breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)
		stale.UID = breakertest.OtherUID
		cur := breakertest.WithEntries(t, base, circuit.Record{breakertest.WhA: stale})
		next, changes := breakertest.Plan(t, cur, decide.Inputs{Targets: tgts})
		require.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.DroppedStale}, breakertest.Kinds(changes))
		assert.Contains(t, changes[0].Message, string(breakertest.OtherUID))
		want := base.DeepCopy()
		want.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		assert.Equal(t, want, next)
	})

	t.Run("a stale entry for a webhook no longer in the configuration is dropped", func(t *testing.T) {
		stale := breakertest.EntryFor(config.ModeIgnore, breakertest.PolicyFail)
		stale.UID = breakertest.OtherUID
		cur := breakertest.WithEntries(t, base, circuit.Record{breakertest.WhMissing: stale})
		next, changes := breakertest.Plan(t, cur, decide.Inputs{Targets: tgts})
		require.Equal(t, map[string]decide.ChangeKind{breakertest.WhMissing: decide.DroppedStale}, breakertest.Kinds(changes))
		assert.Equal(t, base, next)
	})

	t.Run("an entry for a webhook no longer in the configuration is dropped", func(t *testing.T) {
		cur := breakertest.WithEntries(t, base, circuit.Record{breakertest.WhMissing: breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)})
		next, changes := breakertest.Plan(t, cur, decide.Inputs{Targets: append(tgts, breakertest.Target(breakertest.WhMissing, config.ModeBypass, 1, 1)), Evidence: map[string]decide.Evidence{breakertest.WhMissing: {Probe: breakertest.Healthy(3)}}})
		require.Equal(t, map[string]decide.ChangeKind{breakertest.WhMissing: decide.DroppedStale}, breakertest.Kinds(changes))
		assert.Equal(t, base, next)
	})

	t.Run("an entry for a webhook that is no longer a target is closed and restored", func(t *testing.T) {
		cur := breakertest.WithEntries(t, base, circuit.Record{
			breakertest.WhA:     breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail),
			breakertest.WhOther: breakertest.EntryFor(config.ModeIgnore, nil),
		})
		next, changes := breakertest.Plan(t, cur, decide.Inputs{Targets: tgts})
		require.Equal(t, map[string]decide.ChangeKind{breakertest.WhOther: decide.Closed}, breakertest.Kinds(changes))
		assert.Nil(t, circuit.FindWebhook(next, breakertest.WhOther).FailurePolicy, "the original nil policy is restored")
		rec := breakertest.MustRecord(t, next)
		assert.Equal(t, []string{breakertest.WhA}, rec.Webhooks(), "the target's entry stays")
		assert.Equal(t, cur.Webhooks[0], next.Webhooks[0], "the open target is untouched")
	})

	t.Run("a Bypass entry for a former target loses its marker on close", func(t *testing.T) {
		cur := breakertest.WithEntries(t, base, circuit.Record{breakertest.WhA: breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)})
		next, changes := breakertest.Plan(t, cur, decide.Inputs{Targets: nil})
		require.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Closed}, breakertest.Kinds(changes))
		assert.Equal(t, base, next)
	})
}

func TestPlan_malformedAnnotation_isError(t *testing.T) {
	cases := map[string]string{
		"truncated JSON":         `{"a":`,
		"a JSON list":            `[{"uid":"x"}]`,
		"an entry of wrong type": `{"a":"open"}`,
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			cur := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail))
			cur.Annotations[circuit.Annotation] = raw
			before := cur.DeepCopy()
			next, changes, err := decide.Plan(cur, decide.Inputs{
				Targets:  []config.Target{breakertest.Target(breakertest.WhA, config.ModeIgnore, 1, 1)},
				Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(3, probe.ReasonTimeout)}},
				Now:      breakertest.Now,
			})
			require.Error(t, err)
			assert.Nil(t, next)
			assert.Nil(t, changes)
			assert.Equal(t, before, cur)
		})
	}
}

// The circuit annotation "null" decodes without error in encoding/json; a
// later open must not panic on the resulting record.
func TestPlan_nullCircuitAnnotation_doesNotPanic(t *testing.T) {
	cur := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail))
	cur.Annotations[circuit.Annotation] = "null"
	in := decide.Inputs{
		Targets:  []config.Target{breakertest.Target(breakertest.WhA, config.ModeIgnore, 1, 1)},
		Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(1, probe.ReasonTimeout)}},
		Now:      breakertest.Now,
	}
	var (
		next *admissionregistrationv1.MutatingWebhookConfiguration
		err  error
	)
	require.NotPanics(t, func() { next, _, err = decide.Plan(cur, in) })
	if err == nil {
		require.NotNil(t, next)
		rec := breakertest.MustRecord(t, next)
		assert.Contains(t, rec, breakertest.WhA, "if opened, the open is recorded")
	}
}

func TestPlan_doesNotMutateInput(t *testing.T) {
	base := breakertest.Config(
		breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail, breakertest.MC("x"), breakertest.MC("y")),
		breakertest.Webhook(breakertest.WhB, nil),
		breakertest.Webhook(breakertest.WhOther, breakertest.PolicyFail, breakertest.MC("z")),
	)
	stale := breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)
	stale.UID = breakertest.OtherUID
	tgts := []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 1, 1), breakertest.Target(breakertest.WhB, config.ModeIgnore, 1, 1)}
	openBoth := breakertest.WithEntries(t, base, circuit.Record{breakertest.WhA: breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail), breakertest.WhB: breakertest.EntryFor(config.ModeIgnore, nil)})
	overridden := openBoth.DeepCopy()
	overridden.Annotations[circuit.OverrideAnnotation] = "mine"

	cases := map[string]struct {
		cur     *admissionregistrationv1.MutatingWebhookConfiguration
		targets []config.Target
		counts  map[string]decide.Counts
	}{
		"opening in both modes":   {cur: base, targets: tgts, counts: map[string]decide.Counts{breakertest.WhA: breakertest.Failing(1, probe.ReasonTLS), breakertest.WhB: breakertest.Failing(1, probe.ReasonTLS)}},
		"closing in both modes":   {cur: openBoth, targets: tgts, counts: map[string]decide.Counts{breakertest.WhA: breakertest.Healthy(1), breakertest.WhB: breakertest.Healthy(1)}},
		"handing off":             {cur: overridden, targets: tgts},
		"dropping a stale entry":  {cur: breakertest.WithEntries(t, base, circuit.Record{breakertest.WhA: stale}), targets: tgts},
		"closing a former target": {cur: openBoth, targets: nil},
		"opening with nil annotations": {cur: func() *admissionregistrationv1.MutatingWebhookConfiguration {
			c := base.DeepCopy()
			c.Annotations = nil
			return c
		}(), targets: tgts, counts: map[string]decide.Counts{breakertest.WhA: breakertest.Failing(1, probe.ReasonTLS)}},
		"changing nothing at all":        {cur: openBoth, targets: tgts},
		"opening with spare slice space": {cur: withSpareCapacity(base), targets: tgts, counts: map[string]decide.Counts{breakertest.WhA: breakertest.Failing(1, probe.ReasonTLS)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := tc.cur.DeepCopy()
			next, changes := breakertest.Plan(t, tc.cur, decide.Inputs{Targets: tc.targets, Evidence: breakertest.Probed(tc.counts)})
			assert.Equal(t, before, tc.cur, "Plan left its input as it was")
			if len(changes) == 0 {
				assert.Same(t, tc.cur, next, "with no changes the result is the input itself")
				return
			}

			// The result shares nothing mutable with the input.
			for i := range next.Webhooks {
				wh := &next.Webhooks[i]
				if wh.FailurePolicy != nil {
					*wh.FailurePolicy = "Mutated"
				}
				for j := range wh.MatchConditions {
					wh.MatchConditions[j].Name = "mutated"
				}
				wh.MatchConditions = append(wh.MatchConditions, admissionregistrationv1.MatchCondition{Name: "appended"})
			}
			if next.Annotations != nil {
				next.Annotations["mutated"] = "yes"
			}
			assert.Equal(t, before, tc.cur, "the result does not alias the input")
		})
	}
}

// withSpareCapacity gives every matchConditions slice room to grow, so an
// append on a shallow copy would write into the input's backing array.
func withSpareCapacity(cfg *admissionregistrationv1.MutatingWebhookConfiguration) *admissionregistrationv1.MutatingWebhookConfiguration {
	out := cfg.DeepCopy()
	for i := range out.Webhooks {
		mcs := make([]admissionregistrationv1.MatchCondition, len(out.Webhooks[i].MatchConditions), len(out.Webhooks[i].MatchConditions)+4)
		copy(mcs, out.Webhooks[i].MatchConditions)
		out.Webhooks[i].MatchConditions = mcs
	}
	return out
}

// TestPlan_property_randomSequences drives two targets through random
// probe outcomes and checks after every write that a webhook has an entry
// if and only if the breaker's changes are in place, and that everything
// is back to the original once the circuits close.
func TestPlan_property_randomSequences(t *testing.T) {
	rng := rand.New(rand.NewSource(20250304))
	policies := []*admissionregistrationv1.FailurePolicyType{nil, breakertest.PolicyFail, breakertest.PolicyIgnore}
	condSets := [][]admissionregistrationv1.MatchCondition{nil, {breakertest.MC("x")}, {breakertest.MC("x"), breakertest.MC("y")}}
	modes := []config.Mode{config.ModeIgnore, config.ModeBypass}
	reasons := []probe.FailureReason{probe.ReasonTimeout, probe.ReasonRefused, probe.ReasonTLS, probe.ReasonHTTPStatus, probe.ReasonBadResponse, probe.ReasonNoRoute}
	names := []string{breakertest.WhA, breakertest.WhB}

	const sequences, length = 200, 30
	for s := 0; s < sequences; s++ {
		tgts := make([]config.Target, len(names))
		var hooks []admissionregistrationv1.MutatingWebhook
		for i, n := range names {
			tgts[i] = breakertest.Target(n, modes[rng.Intn(len(modes))], 1+rng.Intn(4), 1+rng.Intn(4))
			hooks = append(hooks, breakertest.Webhook(n, policies[rng.Intn(len(policies))], condSets[rng.Intn(len(condSets))]...))
		}
		hooks = append(hooks, breakertest.Webhook(breakertest.WhOther, breakertest.PolicyFail, breakertest.MC("o")))
		rng.Shuffle(len(hooks), func(i, j int) { hooks[i], hooks[j] = hooks[j], hooks[i] })
		orig := breakertest.Config(hooks...)
		cur := orig.DeepCopy()

		counts := map[string]decide.Counts{}
		modelOpen := map[string]bool{}
		openedAt := map[string]time.Time{}
		openReason := map[string]string{}
		now := breakertest.Now
		trace := ""

		step := func(outcomes map[string]byte) {
			t.Helper()
			now = now.Add(1500 * time.Millisecond)
			wantKinds := map[string]decide.ChangeKind{}
			for i, n := range names {
				c := counts[n]
				switch outcomes[n] {
				case 'H':
					c.Observe(breakertest.HealthyResult())
				case 'F':
					c.Observe(breakertest.FailedResult(reasons[rng.Intn(len(reasons))]))
				default:
					c.Observe(breakertest.UnknownResult())
				}
				counts[n] = c
				tg := tgts[i]
				ow := circuit.FindWebhook(orig, n)
				adminIgnore := tg.Mode == config.ModeIgnore && ow.FailurePolicy != nil && *ow.FailurePolicy == admissionregistrationv1.Ignore
				switch {
				case !modelOpen[n] && c.Failures >= tg.OpenAfter && !adminIgnore:
					modelOpen[n] = true
					openedAt[n] = now.UTC().Truncate(time.Second)
					openReason[n] = string(c.Last.Reason)
					wantKinds[n] = decide.Opened
				case modelOpen[n] && c.Successes >= tg.CloseAfter:
					modelOpen[n] = false
					wantKinds[n] = decide.Closed
				}
			}
			trace += fmt.Sprintf("%c%c ", outcomes[breakertest.WhA], outcomes[breakertest.WhB])
			msg := fmt.Sprintf("sequence %d targets %+v steps %s", s, tgts, trace)

			prev := cur.DeepCopy()
			next, changes, err := decide.Plan(cur, decide.Inputs{Targets: tgts, Evidence: breakertest.Probed(counts), Now: now})
			require.NoError(t, err, msg)
			require.NotNil(t, next, msg)
			require.Equal(t, prev, cur, "Plan mutated its input; %s", msg)
			require.Equal(t, wantKinds, breakertest.Kinds(changes), msg)
			require.Len(t, changes, len(wantKinds), msg)
			if len(changes) == 0 {
				require.Equal(t, cur, next, "no changes means no write; %s", msg)
			}
			cur = next

			rec := breakertest.MustRecord(t, cur)
			require.Equal(t, orig.Labels, cur.Labels, msg)
			require.Equal(t, "me", cur.Annotations["keep"], msg)
			require.Equal(t, orig.ObjectMeta.ResourceVersion, cur.ResourceVersion, msg)
			require.Equal(t, *circuit.FindWebhook(orig, breakertest.WhOther), *circuit.FindWebhook(cur, breakertest.WhOther), "non-target untouched; %s", msg)
			require.Len(t, cur.Webhooks, len(orig.Webhooks), msg)
			for i, wh := range cur.Webhooks {
				require.Equal(t, orig.Webhooks[i].Name, wh.Name, "webhook order kept; %s", msg)
			}
			for i, n := range names {
				tg := tgts[i]
				ow := circuit.FindWebhook(orig, n)
				wh := circuit.FindWebhook(cur, n)
				e, has := rec[n]
				require.Equal(t, modelOpen[n], has, "entry for %s exists iff the circuit is open; %s", n, msg)
				if !has {
					require.Equal(t, *ow, *wh, "without an entry %s is as it was; %s", n, msg)
					continue
				}
				require.Equal(t, breakertest.UID, e.UID, msg)
				require.Equal(t, tg.Mode, e.Mode, msg)
				require.Equal(t, ow.FailurePolicy, e.OriginalFailurePolicy, msg)
				require.True(t, openedAt[n].Equal(e.OpenedAt.Time), "openedAt %s want %s; %s", e.OpenedAt, openedAt[n], msg)
				require.Equal(t, openReason[n], e.Reason, msg)
				require.Equal(t, breakertest.PolicyIgnore, wh.FailurePolicy, "with an entry %s is Ignore; %s", n, msg)
				got := *wh
				want := *ow
				if tg.Mode == config.ModeBypass {
					require.NotEmpty(t, wh.MatchConditions, msg)
					require.Equal(t, breakertest.BypassMarker(), wh.MatchConditions[len(wh.MatchConditions)-1], "marker last; %s", msg)
					want.MatchConditions = append(append([]admissionregistrationv1.MatchCondition(nil), ow.MatchConditions...), breakertest.BypassMarker())
				}
				want.FailurePolicy = breakertest.PolicyIgnore
				require.Equal(t, want, got, "only the breaker's fields differ for %s; %s", n, msg)
			}
		}

		letters := []byte{'H', 'H', 'F', 'F', 'U'}
		for i := 0; i < length; i++ {
			step(map[string]byte{breakertest.WhA: letters[rng.Intn(len(letters))], breakertest.WhB: letters[rng.Intn(len(letters))]})
		}
		for i := 0; i < 4; i++ {
			step(map[string]byte{breakertest.WhA: 'H', breakertest.WhB: 'H'})
		}
		require.False(t, modelOpen[breakertest.WhA] || modelOpen[breakertest.WhB], "the model closed both circuits")
		require.Equal(t, orig.Webhooks, cur.Webhooks, "sequence %d: every webhook is restored exactly; %s", s, trace)
		require.True(t, equality.Semantic.DeepEqual(orig, cur), "sequence %d: the object is back to the original; %s", s, trace)
	}
}

// TestPlan_overwrittenChanges_onlyWhatOthersChangedStands: when someone
// changed the breaker's fields despite the guard, only the fields they
// changed become the baseline; the breaker's own leftovers are put back.
// Before the fix, removing only the marker left the breaker's Ignore as
// the baseline and the original Fail was lost.
func TestPlan_overwrittenChanges_onlyWhatOthersChangedStands(t *testing.T) {
	base := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail, breakertest.MC("x")), breakertest.Webhook(breakertest.WhOther, breakertest.PolicyFail))
	tgts := []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 3)}
	cases := map[string]struct {
		overwrite  func(*admissionregistrationv1.MutatingWebhookConfiguration)
		original   *admissionregistrationv1.FailurePolicyType
		wantPolicy *admissionregistrationv1.FailurePolicyType
	}{
		"failurePolicy set back to Fail: theirs stands, the breaker's marker goes": {
			overwrite: func(m *admissionregistrationv1.MutatingWebhookConfiguration) {
				m.Webhooks[0].FailurePolicy = breakertest.PolicyFail
			},
			original:   breakertest.PolicyFail,
			wantPolicy: breakertest.PolicyFail,
		},
		"only the bypass marker removed: the breaker's Ignore goes, the original Fail is back": {
			overwrite:  func(m *admissionregistrationv1.MutatingWebhookConfiguration) { circuit.RemoveBypass(&m.Webhooks[0]) },
			original:   breakertest.PolicyFail,
			wantPolicy: breakertest.PolicyFail,
		},
		"only the bypass marker removed: an unset original stays unset": {
			overwrite:  func(m *admissionregistrationv1.MutatingWebhookConfiguration) { circuit.RemoveBypass(&m.Webhooks[0]) },
			original:   nil,
			wantPolicy: nil,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cur := breakertest.WithEntries(t, base, circuit.Record{breakertest.WhA: breakertest.EntryFor(config.ModeBypass, tc.original)})
			tc.overwrite(cur)
			want := cur.DeepCopy()
			circuit.RemoveBypass(&want.Webhooks[0])
			want.Webhooks[0].FailurePolicy = tc.wantPolicy

			next, changes := breakertest.Plan(t, cur, decide.Inputs{Targets: tgts, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(1, probe.ReasonTimeout)}}})
			require.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Overwritten}, breakertest.Kinds(changes))
			assert.Equal(t, want.Webhooks, next.Webhooks)
			assert.NotContains(t, next.Annotations, circuit.Annotation)
		})
	}
}

// TestPlan_unprobeableWhileOpen_closes: a target that can no longer be
// probed would otherwise stay open for good.
func TestPlan_unprobeableWhileOpen_closes(t *testing.T) {
	base := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail, breakertest.MC("x")))
	tgts := []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 3)}
	open := breakertest.WithEntries(t, base, circuit.Record{breakertest.WhA: breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)})
	next, changes := breakertest.Plan(t, open, decide.Inputs{Targets: tgts, Evidence: map[string]decide.Evidence{breakertest.WhA: {Unprobeable: "sideEffects is Some"}}})
	require.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Closed}, breakertest.Kinds(changes))
	assert.Contains(t, changes[0].Message, "can no longer be probed (sideEffects is Some)")
	assert.Equal(t, base.Webhooks, next.Webhooks, "the original is restored exactly")
	assert.NotContains(t, next.Annotations, circuit.Annotation)

	// A closed one stays closed, whatever its counts say.
	_, changes = breakertest.Plan(t, base, decide.Inputs{Targets: tgts, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(5, probe.ReasonTimeout), Unprobeable: "x"}}})
	assert.Empty(t, changes)
}

// TestPlan_anotherInstallationsEntryIsLeftAlone: an entry signed by
// another breaker identity (a second installation) is neither closed,
// dropped, handed off nor counted as this breaker's circuit.
func TestPlan_anotherInstallationsEntryIsLeftAlone(t *testing.T) {
	base := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail, breakertest.MC("x")), breakertest.Webhook(breakertest.WhB, breakertest.PolicyFail))
	theirs := breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)
	theirs.By = "system:serviceaccount:canary:webhook-guard"
	cur := breakertest.WithEntries(t, base, circuit.Record{breakertest.WhA: theirs})
	for name, in := range map[string]decide.Inputs{
		"a healthy target":      {Targets: []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 1, 1)}, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(5)}}},
		"not a target":          {Targets: []config.Target{breakertest.Target(breakertest.WhB, config.ModeBypass, 1, 1)}},
		"an unprobeable target": {Targets: []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 1, 1)}, Evidence: map[string]decide.Evidence{breakertest.WhA: {Unprobeable: "x"}}},
	} {
		t.Run(name, func(t *testing.T) {
			in.Signer = "system:serviceaccount:main:webhook-guard"
			_, changes := breakertest.Plan(t, cur, in)
			assert.Empty(t, changes)
		})
	}
	withOverride := cur.DeepCopy()
	withOverride.Annotations[circuit.OverrideAnnotation] = "mine now"
	_, changes := breakertest.Plan(t, withOverride, decide.Inputs{Signer: "system:serviceaccount:main:webhook-guard"})
	assert.Empty(t, changes, "the other installation hands off its own entry")

	opened, changes := breakertest.Plan(t, base, decide.Inputs{Signer: "me", Now: breakertest.Now, Targets: []config.Target{breakertest.Target(breakertest.WhB, config.ModeIgnore, 1, 1)}, Evidence: map[string]decide.Evidence{breakertest.WhB: {Probe: breakertest.Failing(1, probe.ReasonTimeout)}}})
	require.Len(t, changes, 1)
	assert.Equal(t, "me", breakertest.MustRecord(t, opened)[breakertest.WhB].By, "new entries are signed")
}

// TestPlan_unreadableRecord: nothing is guessed, and the override still
// hands the configuration over.
func TestPlan_unreadableRecord(t *testing.T) {
	base := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail, breakertest.MC("x")))
	tgts := []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 1, 1)}
	cur := breakertest.WithEntries(t, base, circuit.Record{breakertest.WhA: breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)})
	cur.Annotations[circuit.Annotation] = `{garbage`
	_, _, err := decide.Plan(cur, decide.Inputs{Targets: tgts, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(3)}}})
	require.Error(t, err, "without a readable record nothing is changed, not even a close")

	cur.Annotations[circuit.OverrideAnnotation] = "INC-7: fixing it by hand"
	next, changes := breakertest.Plan(t, cur, decide.Inputs{Targets: tgts, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(3)}}})
	require.Len(t, changes, 1)
	assert.Equal(t, decide.HandedOff, changes[0].Kind)
	assert.Equal(t, `{garbage`, next.Annotations[circuit.Annotation], "the record stays, for an administrator to read")
	assert.Equal(t, breakertest.PolicyIgnore, next.Webhooks[0].FailurePolicy, "failurePolicy stays as it is")
	assert.Equal(t, []admissionregistrationv1.MatchCondition{breakertest.MC("x")}, next.Webhooks[0].MatchConditions, "only the bypass marker goes")
}

// BenchmarkPlan_openAndClose measures one open and one close decision on a
// configuration with two webhooks, record encoding included.
func BenchmarkPlan_openAndClose(b *testing.B) {
	base := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail, breakertest.MC("x")), breakertest.Webhook(breakertest.WhOther, breakertest.PolicyFail))
	tgts := []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 3)}
	open := decide.Inputs{Targets: tgts, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(3, probe.ReasonTimeout)}}}
	closeIn := decide.Inputs{Targets: tgts, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(3)}}}
	for b.Loop() {
		opened, _, err := decide.Plan(base, open)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := decide.Plan(opened, closeIn); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlan_noChange is the steady state: the reconciler decides that
// nothing is to be written.
func BenchmarkPlan_noChange(b *testing.B) {
	base := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail, breakertest.MC("x")), breakertest.Webhook(breakertest.WhOther, breakertest.PolicyFail))
	in := decide.Inputs{Targets: []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 3)}, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(3)}}}
	for b.Loop() {
		if _, _, err := decide.Plan(base, in); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPlan_override_handOffKeepsTheOriginal: the handoff removes the
// entry, the only place the original failurePolicy was kept, so the
// HandedOff Event says what it was, how the circuit was open and since
// when, whatever the length of the override's reason.
func TestPlan_override_handOffKeepsTheOriginal(t *testing.T) {
	base := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail, breakertest.MC("x")), breakertest.Webhook(breakertest.WhB, nil))
	bypass := breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)
	bypass.By = "system:serviceaccount:main:webhook-guard"
	ignore := breakertest.EntryFor(config.ModeIgnore, nil)
	ignore.By = bypass.By
	for name, tc := range map[string]struct {
		webhook, reason string
		entry           circuit.Entry
		want            string
	}{
		"a Bypass circuit over Fail names Fail, the mode and the opening": {
			webhook: breakertest.WhA, reason: "INC-42", entry: bypass,
			want: "original failurePolicy Fail, mode Bypass, opened at 2025-01-01T00:00:00Z by system:serviceaccount:main:webhook-guard",
		},
		"an Ignore circuit over an unset failurePolicy says unset": {
			webhook: breakertest.WhB, reason: "INC-42", entry: ignore,
			want: "original failurePolicy unset, mode Ignore, opened at 2025-01-01T00:00:00Z",
		},
		"a reason longer than an Event note does not push the original out": {
			webhook: breakertest.WhA, reason: strings.Repeat("very long reason ", 200), entry: bypass,
			want: "original failurePolicy Fail, mode Bypass, opened at 2025-01-01T00:00:00Z",
		},
	} {
		t.Run(name, func(t *testing.T) {
			cur := breakertest.WithEntries(t, base, circuit.Record{tc.webhook: tc.entry})
			cur.Annotations[circuit.OverrideAnnotation] = tc.reason
			next, changes := breakertest.Plan(t, cur, decide.Inputs{Signer: bypass.By})
			require.Len(t, changes, 1)
			assert.Equal(t, decide.HandedOff, changes[0].Kind)
			assert.Contains(t, changes[0].Message, tc.want)
			assert.Contains(t, changes[0].Message, "failurePolicy stays Ignore as it is now")
			assert.LessOrEqual(t, len(changes[0].Message), circuit.EventNoteLimit, "kube-apiserver rejects a longer Event")
			kept := breakertest.MustRecord(t, next)[tc.webhook]
			assert.True(t, kept.HandedOff())
			assert.Equal(t, tc.entry.OriginalFailurePolicy, kept.OriginalFailurePolicy, "the record keeps the original")
		})
	}
}

// TestTakeOver_resignsOnlyRetiredSigners: entries of an identity that no
// longer runs are signed anew, and then closed as this breaker's own;
// another live installation's entries, this breaker's own and unsigned
// ones are not touched, and nothing but the record changes.
func TestTakeOver_resignsOnlyRetiredSigners(t *testing.T) {
	const me, old, live = "system:serviceaccount:new:webhook-guard", "system:serviceaccount:old:webhook-guard", "system:serviceaccount:canary:webhook-guard/canary"
	signed := func(e circuit.Entry, by string) circuit.Entry { e.By = by; return e }
	base := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail, breakertest.MC("x")), breakertest.Webhook(breakertest.WhB, breakertest.PolicyFail), breakertest.Webhook(breakertest.WhOther, nil), breakertest.Webhook(breakertest.WhMissing, breakertest.PolicyFail))
	cur := breakertest.WithEntries(t, base, circuit.Record{
		breakertest.WhA:       signed(breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail), old),
		breakertest.WhB:       signed(breakertest.EntryFor(config.ModeIgnore, breakertest.PolicyFail), live),
		breakertest.WhOther:   signed(breakertest.EntryFor(config.ModeIgnore, nil), me),
		breakertest.WhMissing: breakertest.EntryFor(config.ModeIgnore, breakertest.PolicyFail),
	})

	next, changes, err := decide.TakeOver(cur, me, map[string]string{old: "its Lease old/webhook-guard.webhook-guard.io was released"})
	require.NoError(t, err)
	require.Len(t, changes, 1)
	assert.Equal(t, decide.Takeover{Webhook: breakertest.WhA, From: old, Message: "webhook-guard " + me + " took over the open circuit on " + breakertest.WhA + " from " + old +
		", which no longer runs (its Lease old/webhook-guard.webhook-guard.io was released); from now on it closes the circuit as its own " +
		"(original failurePolicy Fail, mode Bypass, opened at 2025-01-01T00:00:00Z by " + old + ")"}, changes[0])
	rec := breakertest.MustRecord(t, next)
	assert.Equal(t, me, rec[breakertest.WhA].By)
	assert.Equal(t, live, rec[breakertest.WhB].By, "a live installation's entry is not taken")
	assert.Equal(t, me, rec[breakertest.WhOther].By)
	assert.Empty(t, rec[breakertest.WhMissing].By, "an unsigned entry is already every breaker's")
	want := breakertest.MustRecord(t, cur)
	want[breakertest.WhA] = signed(want[breakertest.WhA], me)
	assert.Equal(t, want, rec, "only the signature changes")
	assert.Equal(t, breakertest.WithoutCircuit(cur), breakertest.WithoutCircuit(next), "nothing but the record changes")

	closed, closing := breakertest.Plan(t, next, decide.Inputs{Signer: me, Targets: []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 1, 1)}, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(1)}}})
	assert.Equal(t, decide.Closed, breakertest.Kinds(closing)[breakertest.WhA], "the new identity closes what it took over")
	assert.Equal(t, base.Webhooks[0], closed.Webhooks[0])

	same, none, err := decide.TakeOver(next, me, map[string]string{old: "gone"})
	require.NoError(t, err)
	assert.Empty(t, none)
	assert.Same(t, next, same, "nothing to take over, nothing to write")

	broken := cur.DeepCopy()
	broken.Annotations[circuit.Annotation] = "{garbage"
	_, _, err = decide.TakeOver(broken, me, map[string]string{old: "gone"})
	assert.Error(t, err, "an unreadable record is not guessed at")
}
