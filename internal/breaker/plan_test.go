package breaker

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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

const (
	testUID   types.UID = "11111111-2222-4333-8444-555555555555"
	otherUID  types.UID = "99999999-8888-4777-8666-555555555555"
	cfgName             = "pod-defaults"
	whA                 = "a.pod-defaults.example.com"
	whB                 = "b.pod-defaults.example.com"
	whOther             = "other.pod-defaults.example.com"
	whMissing           = "gone.pod-defaults.example.com"
)

// testNow is deliberately not in UTC and not on a whole second.
var testNow = time.Date(2025, 3, 4, 5, 6, 7, 890_000_000, time.FixedZone("CET", 3600))

var (
	policyFail   = ptr.To(admissionregistrationv1.Fail)
	policyIgnore = ptr.To(admissionregistrationv1.Ignore)
)

func bypassMarker() admissionregistrationv1.MatchCondition {
	return admissionregistrationv1.MatchCondition{Name: circuit.BypassCondition, Expression: "false"}
}

func mc(name string) admissionregistrationv1.MatchCondition {
	return admissionregistrationv1.MatchCondition{Name: name, Expression: "request.namespace != '" + name + "'"}
}

// newWebhook returns a webhook with every field set that the breaker must
// not touch.
func newWebhook(name string, policy *admissionregistrationv1.FailurePolicyType, conds ...admissionregistrationv1.MatchCondition) admissionregistrationv1.MutatingWebhook {
	if policy != nil {
		policy = ptr.To(*policy)
	}
	var mcs []admissionregistrationv1.MatchCondition
	if len(conds) > 0 {
		mcs = append(mcs, conds...)
	}
	return admissionregistrationv1.MutatingWebhook{
		Name: name,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{
			Service:  &admissionregistrationv1.ServiceReference{Namespace: "ns", Name: "svc", Path: ptr.To("/mutate"), Port: ptr.To[int32](8443)},
			CABundle: []byte("ca"),
		},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
		}},
		FailurePolicy:           policy,
		MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
		NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"inject": "true"}},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:          ptr.To[int32](7),
		AdmissionReviewVersions: []string{"v1"},
		ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
		MatchConditions:         mcs,
	}
}

func newConfig(webhooks ...admissionregistrationv1.MutatingWebhook) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{
			Name:            cfgName,
			UID:             testUID,
			ResourceVersion: "42",
			Generation:      3,
			Labels:          map[string]string{"app": "pod-defaults"},
			Annotations:     map[string]string{"keep": "me"},
		},
		Webhooks: webhooks,
	}
}

func target(name string, mode config.Mode, openAfter, closeAfter int) config.Target {
	return config.Target{Kind: circuit.KindMutating, Configuration: cfgName, Webhook: name, Mode: mode, OpenAfter: openAfter, CloseAfter: closeAfter}
}

func failing(n int, reason probe.FailureReason) Counts {
	var c Counts
	for i := 0; i < n; i++ {
		c.Observe(failedResult(reason))
	}
	return c
}

func healthy(n int) Counts {
	var c Counts
	for i := 0; i < n; i++ {
		c.Observe(healthyResult())
	}
	return c
}

// withEntries returns cfg with the record set and the breaker's changes
// applied as if it had opened each webhook.
func withEntries(t *testing.T, cfg *admissionregistrationv1.MutatingWebhookConfiguration, rec circuit.Record) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	out := cfg.DeepCopy()
	for name, e := range rec {
		wh := circuit.FindWebhook(out, name)
		if wh == nil {
			continue
		}
		wh.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		if e.Mode == config.ModeBypass {
			wh.MatchConditions = append(wh.MatchConditions, bypassMarker())
		}
	}
	ann, err := circuit.Encode(out.Annotations, rec)
	require.NoError(t, err)
	out.Annotations = ann
	return out
}

func entryFor(mode config.Mode, original *admissionregistrationv1.FailurePolicyType) circuit.Entry {
	return circuit.Entry{
		UID:                   testUID,
		Mode:                  mode,
		OpenedAt:              metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)),
		Reason:                string(probe.ReasonRefused),
		OriginalFailurePolicy: original,
	}
}

func mustRecord(t *testing.T, mwc *admissionregistrationv1.MutatingWebhookConfiguration) circuit.Record {
	t.Helper()
	rec, err := circuit.Decode(mwc.Annotations)
	require.NoError(t, err)
	return rec
}

// withoutCircuit returns a copy of mwc without the circuit annotation, to
// compare everything else.
func withoutCircuit(mwc *admissionregistrationv1.MutatingWebhookConfiguration) *admissionregistrationv1.MutatingWebhookConfiguration {
	out := mwc.DeepCopy()
	delete(out.Annotations, circuit.Annotation)
	return out
}

func kinds(changes []Change) map[string]ChangeKind {
	out := map[string]ChangeKind{}
	for _, c := range changes {
		out[c.Webhook] = c.Kind
	}
	return out
}

func plan(t *testing.T, cur *admissionregistrationv1.MutatingWebhookConfiguration, in Inputs) (*admissionregistrationv1.MutatingWebhookConfiguration, []Change) {
	t.Helper()
	if in.Now.IsZero() {
		in.Now = testNow
	}
	next, changes, err := Plan(cur, in)
	require.NoError(t, err)
	require.NotNil(t, next)
	return next, changes
}

func TestPlan_open_ignoreMode(t *testing.T) {
	cur := newConfig(
		newWebhook(whA, policyFail, mc("x")),
		newWebhook(whOther, policyFail),
	)
	next, changes := plan(t, cur, Inputs{
		Targets: []config.Target{target(whA, config.ModeIgnore, 3, 5)},
		Counts:  map[string]Counts{whA: failing(3, probe.ReasonTimeout)},
	})

	require.Len(t, changes, 1)
	assert.Equal(t, whA, changes[0].Webhook)
	assert.Equal(t, Opened, changes[0].Kind)
	assert.NotEmpty(t, changes[0].Message)

	want := cur.DeepCopy()
	want.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	assert.Equal(t, want, withoutCircuit(next), "only the failurePolicy of the target and the circuit annotation change")

	raw := next.Annotations[circuit.Annotation]
	assert.Contains(t, raw, `"openedAt":"2025-03-04T04:06:07Z"`, "openedAt is UTC and truncated to seconds")
	rec := mustRecord(t, next)
	require.Equal(t, []string{whA}, rec.Webhooks())
	e := rec[whA]
	assert.Equal(t, testUID, e.UID)
	assert.Equal(t, config.ModeIgnore, e.Mode)
	assert.Equal(t, string(probe.ReasonTimeout), e.Reason)
	assert.True(t, e.OpenedAt.Time.Equal(time.Date(2025, 3, 4, 4, 6, 7, 0, time.UTC)), "openedAt %s", e.OpenedAt)
	require.NotNil(t, e.OriginalFailurePolicy)
	assert.Equal(t, admissionregistrationv1.Fail, *e.OriginalFailurePolicy)
}

func TestPlan_open_bypassThenClose_restoresExactly(t *testing.T) {
	cases := map[string]struct {
		policy *admissionregistrationv1.FailurePolicyType
		conds  []admissionregistrationv1.MatchCondition
	}{
		"a Fail webhook with two matchConditions keeps them in order":    {policy: policyFail, conds: []admissionregistrationv1.MatchCondition{mc("x"), mc("y")}},
		"a webhook with nil failurePolicy and nil matchConditions":       {policy: nil, conds: nil},
		"a webhook with nil failurePolicy and one matchCondition":        {policy: nil, conds: []admissionregistrationv1.MatchCondition{mc("x")}},
		"a Fail webhook without matchConditions":                         {policy: policyFail},
		"an Ignore baseline gets the marker and keeps Ignore afterwards": {policy: policyIgnore, conds: []admissionregistrationv1.MatchCondition{mc("x")}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cur := newConfig(
				newWebhook(whOther, policyFail, mc("o")),
				newWebhook(whA, tc.policy, tc.conds...),
			)
			orig := cur.DeepCopy()
			tgt := []config.Target{target(whA, config.ModeBypass, 2, 3)}

			opened, changes := plan(t, cur, Inputs{Targets: tgt, Counts: map[string]Counts{whA: failing(2, probe.ReasonTLS)}})
			require.Equal(t, map[string]ChangeKind{whA: Opened}, kinds(changes))
			wh := circuit.FindWebhook(opened, whA)
			require.NotNil(t, wh)
			assert.Equal(t, policyIgnore, wh.FailurePolicy)
			require.Len(t, wh.MatchConditions, len(tc.conds)+1)
			assert.Equal(t, bypassMarker(), wh.MatchConditions[len(tc.conds)], "the marker is appended at the end")
			if len(tc.conds) > 0 {
				assert.Equal(t, tc.conds, wh.MatchConditions[:len(tc.conds)], "existing matchConditions are untouched")
			}
			assert.Equal(t, orig.Webhooks[0], opened.Webhooks[0], "the other webhook is untouched")
			rec := mustRecord(t, opened)
			require.Contains(t, rec, whA)
			assert.Equal(t, config.ModeBypass, rec[whA].Mode)
			assert.Equal(t, tc.policy, rec[whA].OriginalFailurePolicy)
			assert.Equal(t, string(probe.ReasonTLS), rec[whA].Reason)

			// Fewer successes than closeAfter: nothing moves.
			still, changes := plan(t, opened, Inputs{Targets: tgt, Counts: map[string]Counts{whA: healthy(2)}})
			assert.Empty(t, changes)
			assert.Equal(t, opened, still)

			closed, changes := plan(t, opened, Inputs{Targets: tgt, Counts: map[string]Counts{whA: healthy(3)}})
			require.Equal(t, map[string]ChangeKind{whA: Closed}, kinds(changes))
			assert.Equal(t, orig.Webhooks, closed.Webhooks, "every webhook field is restored exactly")
			assert.Equal(t, orig.Annotations, closed.Annotations, "the circuit annotation is gone, the others stay")
			assert.True(t, equality.Semantic.DeepEqual(orig, closed), "the object is back to the original")
			assert.Equal(t, orig, closed)
		})
	}
}

func TestPlan_open_ignoreModeRestoresNilPolicy(t *testing.T) {
	cur := newConfig(newWebhook(whA, nil))
	cur.Annotations = nil
	orig := cur.DeepCopy()
	tgt := []config.Target{target(whA, config.ModeIgnore, 1, 1)}

	opened, changes := plan(t, cur, Inputs{Targets: tgt, Counts: map[string]Counts{whA: failing(1, probe.ReasonNoRoute)}})
	require.Equal(t, map[string]ChangeKind{whA: Opened}, kinds(changes))
	assert.Equal(t, policyIgnore, opened.Webhooks[0].FailurePolicy)
	assert.Nil(t, opened.Webhooks[0].MatchConditions, "Ignore mode adds no marker")
	require.Contains(t, opened.Annotations, circuit.Annotation, "nil annotations are allocated")
	assert.Nil(t, mustRecord(t, opened)[whA].OriginalFailurePolicy)

	closed, changes := plan(t, opened, Inputs{Targets: tgt, Counts: map[string]Counts{whA: healthy(1)}})
	require.Equal(t, map[string]ChangeKind{whA: Closed}, kinds(changes))
	assert.Nil(t, closed.Webhooks[0].FailurePolicy, "an unset failurePolicy is unset again")
	assert.Equal(t, orig.Webhooks, closed.Webhooks)
	assert.True(t, equality.Semantic.DeepEqual(orig, closed))
}

func TestPlan_open_ignoreBaseline(t *testing.T) {
	t.Run("in Ignore mode the administrator's Ignore is left alone and no entry is written", func(t *testing.T) {
		cur := newConfig(newWebhook(whA, policyIgnore))
		next, changes := plan(t, cur, Inputs{
			Targets: []config.Target{target(whA, config.ModeIgnore, 1, 1)},
			Counts:  map[string]Counts{whA: failing(5, probe.ReasonTimeout)},
		})
		assert.Empty(t, changes)
		assert.Equal(t, cur, next)
		assert.NotContains(t, next.Annotations, circuit.Annotation)
	})
	t.Run("in Bypass mode the marker is added and closing removes it and keeps Ignore", func(t *testing.T) {
		cur := newConfig(newWebhook(whA, policyIgnore))
		orig := cur.DeepCopy()
		tgt := []config.Target{target(whA, config.ModeBypass, 3, 2)}
		opened, changes := plan(t, cur, Inputs{Targets: tgt, Counts: map[string]Counts{whA: failing(3, probe.ReasonRefused)}})
		require.Equal(t, map[string]ChangeKind{whA: Opened}, kinds(changes))
		assert.Equal(t, []admissionregistrationv1.MatchCondition{bypassMarker()}, opened.Webhooks[0].MatchConditions)
		assert.Equal(t, policyIgnore, opened.Webhooks[0].FailurePolicy)
		e := mustRecord(t, opened)[whA]
		assert.Equal(t, policyIgnore, e.OriginalFailurePolicy)
		assert.Equal(t, config.ModeBypass, e.Mode)

		closed, changes := plan(t, opened, Inputs{Targets: tgt, Counts: map[string]Counts{whA: healthy(2)}})
		require.Equal(t, map[string]ChangeKind{whA: Closed}, kinds(changes))
		assert.Equal(t, policyIgnore, closed.Webhooks[0].FailurePolicy)
		assert.Nil(t, closed.Webhooks[0].MatchConditions)
		assert.Equal(t, orig, closed)
	})
}

func TestPlan_noTransition_nextEqualsCur(t *testing.T) {
	closedCfg := newConfig(newWebhook(whA, policyFail, mc("x")), newWebhook(whOther, nil))
	openCfg := withEntries(t, closedCfg, circuit.Record{whA: entryFor(config.ModeBypass, policyFail)})
	unknownOnly := Counts{}
	unknownOnly.Observe(unknownResult())
	unknownAfterFailures := failing(2, probe.ReasonTimeout)
	unknownAfterFailures.Observe(unknownResult())
	unknownAfterFailures.Observe(unknownResult())

	cases := map[string]struct {
		cur    *admissionregistrationv1.MutatingWebhookConfiguration
		counts map[string]Counts
	}{
		"a closed circuit below the failure threshold":              {cur: closedCfg, counts: map[string]Counts{whA: failing(2, probe.ReasonTimeout)}},
		"a closed circuit with unknowns after failures below":       {cur: closedCfg, counts: map[string]Counts{whA: unknownAfterFailures}},
		"a closed circuit with only unknown probes":                 {cur: closedCfg, counts: map[string]Counts{whA: unknownOnly}},
		"a closed circuit with successes":                           {cur: closedCfg, counts: map[string]Counts{whA: healthy(10)}},
		"an open circuit below the success threshold":               {cur: openCfg, counts: map[string]Counts{whA: healthy(4)}},
		"an open circuit with more failures":                        {cur: openCfg, counts: map[string]Counts{whA: failing(10, probe.ReasonTimeout)}},
		"an open circuit with only unknown probes":                  {cur: openCfg, counts: map[string]Counts{whA: unknownOnly}},
		"a closed target without counts":                            {cur: closedCfg, counts: nil},
		"an open target without counts":                             {cur: openCfg, counts: map[string]Counts{whOther: failing(9, probe.ReasonTLS)}},
		"counts for a webhook that is not a target move nothing":    {cur: closedCfg, counts: map[string]Counts{whOther: failing(9, probe.ReasonTLS)}},
		"counts for a webhook not in the configuration are ignored": {cur: closedCfg, counts: map[string]Counts{whMissing: failing(9, probe.ReasonTLS)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			next, changes, err := Plan(tc.cur, Inputs{
				Targets: []config.Target{target(whA, config.ModeBypass, 3, 5), target(whMissing, config.ModeIgnore, 1, 1)},
				Counts:  tc.counts,
				Now:     testNow,
			})
			require.NoError(t, err)
			assert.Empty(t, changes)
			assert.Equal(t, tc.cur, next)
			assert.Same(t, tc.cur, next, "with no changes Plan returns its input: it runs on every probe and copies nothing then")
		})
	}
}

func TestPlan_override_handsOff(t *testing.T) {
	base := newConfig(
		newWebhook(whA, policyFail, mc("x")),
		newWebhook(whB, nil),
		newWebhook(whOther, policyFail),
	)
	open := withEntries(t, base, circuit.Record{
		whA: entryFor(config.ModeBypass, policyFail),
		whB: entryFor(config.ModeIgnore, nil),
	})
	tgts := []config.Target{target(whA, config.ModeBypass, 1, 1), target(whB, config.ModeIgnore, 1, 1), target(whOther, config.ModeIgnore, 1, 1)}

	t.Run("a non-empty override removes every entry and the marker and keeps Ignore", func(t *testing.T) {
		cur := open.DeepCopy()
		cur.Annotations[circuit.OverrideAnnotation] = "incident 123: hands off"
		next, changes := plan(t, cur, Inputs{
			Targets: tgts,
			// Even counts that would close or open do nothing under an override.
			Counts: map[string]Counts{whA: healthy(5), whB: healthy(5), whOther: failing(5, probe.ReasonTimeout)},
		})
		assert.Equal(t, map[string]ChangeKind{whA: HandedOff, whB: HandedOff}, kinds(changes))
		for _, c := range changes {
			assert.Contains(t, c.Message, "incident 123")
		}
		assert.NotContains(t, next.Annotations, circuit.Annotation)
		assert.Equal(t, "incident 123: hands off", next.Annotations[circuit.OverrideAnnotation])
		assert.Equal(t, "me", next.Annotations["keep"])

		want := base.DeepCopy()
		want.Annotations[circuit.OverrideAnnotation] = "incident 123: hands off"
		want.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		want.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		assert.Equal(t, want, next, "failurePolicy stays Ignore, the marker is gone, nothing else changes")
	})

	t.Run("an override on a configuration without entries changes nothing", func(t *testing.T) {
		cur := base.DeepCopy()
		cur.Annotations[circuit.OverrideAnnotation] = "mine"
		next, changes := plan(t, cur, Inputs{Targets: tgts, Counts: map[string]Counts{whA: failing(5, probe.ReasonTimeout)}})
		assert.Empty(t, changes)
		assert.Equal(t, cur, next, "an overridden configuration is not opened")
	})

	t.Run("an empty override value is not a hand-off", func(t *testing.T) {
		cur := open.DeepCopy()
		cur.Annotations[circuit.OverrideAnnotation] = ""
		next, changes := plan(t, cur, Inputs{Targets: tgts})
		assert.Empty(t, changes)
		assert.Equal(t, cur, next)

		closed, changes := plan(t, cur, Inputs{Targets: tgts, Counts: map[string]Counts{whA: healthy(1)}})
		assert.Equal(t, map[string]ChangeKind{whA: Closed}, kinds(changes), "the breaker still manages it")
		assert.Equal(t, base.Webhooks[0], closed.Webhooks[0])
	})
}

func TestPlan_staleAndOrphanEntries(t *testing.T) {
	base := newConfig(
		newWebhook(whA, policyFail, mc("x")),
		newWebhook(whOther, policyFail),
	)
	tgts := []config.Target{target(whA, config.ModeBypass, 3, 3)}

	t.Run("an entry with another uid is dropped, the marker removed and the policy kept", func(t *testing.T) {
		stale := entryFor(config.ModeBypass, policyFail)
		stale.UID = otherUID
		cur := withEntries(t, base, circuit.Record{whA: stale})
		next, changes := plan(t, cur, Inputs{Targets: tgts})
		require.Equal(t, map[string]ChangeKind{whA: DroppedStale}, kinds(changes))
		assert.Contains(t, changes[0].Message, string(otherUID))
		want := base.DeepCopy()
		want.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		assert.Equal(t, want, next)
	})

	t.Run("a stale entry for a webhook no longer in the configuration is dropped", func(t *testing.T) {
		stale := entryFor(config.ModeIgnore, policyFail)
		stale.UID = otherUID
		cur := withEntries(t, base, circuit.Record{whMissing: stale})
		next, changes := plan(t, cur, Inputs{Targets: tgts})
		require.Equal(t, map[string]ChangeKind{whMissing: DroppedStale}, kinds(changes))
		assert.Equal(t, base, next)
	})

	t.Run("an entry for a webhook no longer in the configuration is dropped", func(t *testing.T) {
		cur := withEntries(t, base, circuit.Record{whMissing: entryFor(config.ModeBypass, policyFail)})
		next, changes := plan(t, cur, Inputs{Targets: append(tgts, target(whMissing, config.ModeBypass, 1, 1)), Counts: map[string]Counts{whMissing: healthy(3)}})
		require.Equal(t, map[string]ChangeKind{whMissing: DroppedStale}, kinds(changes))
		assert.Equal(t, base, next)
	})

	t.Run("an entry for a webhook that is no longer a target is closed and restored", func(t *testing.T) {
		cur := withEntries(t, base, circuit.Record{
			whA:     entryFor(config.ModeBypass, policyFail),
			whOther: entryFor(config.ModeIgnore, nil),
		})
		next, changes := plan(t, cur, Inputs{Targets: tgts})
		require.Equal(t, map[string]ChangeKind{whOther: Closed}, kinds(changes))
		assert.Nil(t, circuit.FindWebhook(next, whOther).FailurePolicy, "the original nil policy is restored")
		rec := mustRecord(t, next)
		assert.Equal(t, []string{whA}, rec.Webhooks(), "the target's entry stays")
		assert.Equal(t, cur.Webhooks[0], next.Webhooks[0], "the open target is untouched")
	})

	t.Run("a Bypass entry for a former target loses its marker on close", func(t *testing.T) {
		cur := withEntries(t, base, circuit.Record{whA: entryFor(config.ModeBypass, policyFail)})
		next, changes := plan(t, cur, Inputs{Targets: nil})
		require.Equal(t, map[string]ChangeKind{whA: Closed}, kinds(changes))
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
			cur := newConfig(newWebhook(whA, policyFail))
			cur.Annotations[circuit.Annotation] = raw
			before := cur.DeepCopy()
			next, changes, err := Plan(cur, Inputs{
				Targets: []config.Target{target(whA, config.ModeIgnore, 1, 1)},
				Counts:  map[string]Counts{whA: failing(3, probe.ReasonTimeout)},
				Now:     testNow,
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
	cur := newConfig(newWebhook(whA, policyFail))
	cur.Annotations[circuit.Annotation] = "null"
	in := Inputs{
		Targets: []config.Target{target(whA, config.ModeIgnore, 1, 1)},
		Counts:  map[string]Counts{whA: failing(1, probe.ReasonTimeout)},
		Now:     testNow,
	}
	var (
		next *admissionregistrationv1.MutatingWebhookConfiguration
		err  error
	)
	require.NotPanics(t, func() { next, _, err = Plan(cur, in) })
	if err == nil {
		require.NotNil(t, next)
		rec := mustRecord(t, next)
		assert.Contains(t, rec, whA, "if opened, the open is recorded")
	}
}

func TestPlan_doesNotMutateInput(t *testing.T) {
	base := newConfig(
		newWebhook(whA, policyFail, mc("x"), mc("y")),
		newWebhook(whB, nil),
		newWebhook(whOther, policyFail, mc("z")),
	)
	stale := entryFor(config.ModeBypass, policyFail)
	stale.UID = otherUID
	tgts := []config.Target{target(whA, config.ModeBypass, 1, 1), target(whB, config.ModeIgnore, 1, 1)}
	openBoth := withEntries(t, base, circuit.Record{whA: entryFor(config.ModeBypass, policyFail), whB: entryFor(config.ModeIgnore, nil)})
	overridden := openBoth.DeepCopy()
	overridden.Annotations[circuit.OverrideAnnotation] = "mine"

	cases := map[string]struct {
		cur     *admissionregistrationv1.MutatingWebhookConfiguration
		targets []config.Target
		counts  map[string]Counts
	}{
		"opening in both modes":   {cur: base, targets: tgts, counts: map[string]Counts{whA: failing(1, probe.ReasonTLS), whB: failing(1, probe.ReasonTLS)}},
		"closing in both modes":   {cur: openBoth, targets: tgts, counts: map[string]Counts{whA: healthy(1), whB: healthy(1)}},
		"handing off":             {cur: overridden, targets: tgts},
		"dropping a stale entry":  {cur: withEntries(t, base, circuit.Record{whA: stale}), targets: tgts},
		"closing a former target": {cur: openBoth, targets: nil},
		"opening with nil annotations": {cur: func() *admissionregistrationv1.MutatingWebhookConfiguration {
			c := base.DeepCopy()
			c.Annotations = nil
			return c
		}(), targets: tgts, counts: map[string]Counts{whA: failing(1, probe.ReasonTLS)}},
		"changing nothing at all":        {cur: openBoth, targets: tgts},
		"opening with spare slice space": {cur: withSpareCapacity(base), targets: tgts, counts: map[string]Counts{whA: failing(1, probe.ReasonTLS)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := tc.cur.DeepCopy()
			next, changes := plan(t, tc.cur, Inputs{Targets: tc.targets, Counts: tc.counts})
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
	policies := []*admissionregistrationv1.FailurePolicyType{nil, policyFail, policyIgnore}
	condSets := [][]admissionregistrationv1.MatchCondition{nil, {mc("x")}, {mc("x"), mc("y")}}
	modes := []config.Mode{config.ModeIgnore, config.ModeBypass}
	reasons := []probe.FailureReason{probe.ReasonTimeout, probe.ReasonRefused, probe.ReasonTLS, probe.ReasonHTTPStatus, probe.ReasonBadResponse, probe.ReasonNoRoute}
	names := []string{whA, whB}

	const sequences, length = 200, 30
	for s := 0; s < sequences; s++ {
		tgts := make([]config.Target, len(names))
		var hooks []admissionregistrationv1.MutatingWebhook
		for i, n := range names {
			tgts[i] = target(n, modes[rng.Intn(len(modes))], 1+rng.Intn(4), 1+rng.Intn(4))
			hooks = append(hooks, newWebhook(n, policies[rng.Intn(len(policies))], condSets[rng.Intn(len(condSets))]...))
		}
		hooks = append(hooks, newWebhook(whOther, policyFail, mc("o")))
		rng.Shuffle(len(hooks), func(i, j int) { hooks[i], hooks[j] = hooks[j], hooks[i] })
		orig := newConfig(hooks...)
		cur := orig.DeepCopy()

		counts := map[string]Counts{}
		modelOpen := map[string]bool{}
		openedAt := map[string]time.Time{}
		openReason := map[string]string{}
		now := testNow
		trace := ""

		step := func(outcomes map[string]byte) {
			t.Helper()
			now = now.Add(1500 * time.Millisecond)
			wantKinds := map[string]ChangeKind{}
			for i, n := range names {
				c := counts[n]
				switch outcomes[n] {
				case 'H':
					c.Observe(healthyResult())
				case 'F':
					c.Observe(failedResult(reasons[rng.Intn(len(reasons))]))
				default:
					c.Observe(unknownResult())
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
					wantKinds[n] = Opened
				case modelOpen[n] && c.Successes >= tg.CloseAfter:
					modelOpen[n] = false
					wantKinds[n] = Closed
				}
			}
			trace += fmt.Sprintf("%c%c ", outcomes[whA], outcomes[whB])
			msg := fmt.Sprintf("sequence %d targets %+v steps %s", s, tgts, trace)

			prev := cur.DeepCopy()
			next, changes, err := Plan(cur, Inputs{Targets: tgts, Counts: counts, Now: now})
			require.NoError(t, err, msg)
			require.NotNil(t, next, msg)
			require.Equal(t, prev, cur, "Plan mutated its input; %s", msg)
			require.Equal(t, wantKinds, kinds(changes), msg)
			require.Len(t, changes, len(wantKinds), msg)
			if len(changes) == 0 {
				require.Equal(t, cur, next, "no changes means no write; %s", msg)
			}
			cur = next

			rec := mustRecord(t, cur)
			require.Equal(t, orig.Labels, cur.Labels, msg)
			require.Equal(t, "me", cur.Annotations["keep"], msg)
			require.Equal(t, orig.ObjectMeta.ResourceVersion, cur.ResourceVersion, msg)
			require.Equal(t, *circuit.FindWebhook(orig, whOther), *circuit.FindWebhook(cur, whOther), "non-target untouched; %s", msg)
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
				require.Equal(t, testUID, e.UID, msg)
				require.Equal(t, tg.Mode, e.Mode, msg)
				require.Equal(t, ow.FailurePolicy, e.OriginalFailurePolicy, msg)
				require.True(t, openedAt[n].Equal(e.OpenedAt.Time), "openedAt %s want %s; %s", e.OpenedAt, openedAt[n], msg)
				require.Equal(t, openReason[n], e.Reason, msg)
				require.Equal(t, policyIgnore, wh.FailurePolicy, "with an entry %s is Ignore; %s", n, msg)
				got := *wh
				want := *ow
				if tg.Mode == config.ModeBypass {
					require.NotEmpty(t, wh.MatchConditions, msg)
					require.Equal(t, bypassMarker(), wh.MatchConditions[len(wh.MatchConditions)-1], "marker last; %s", msg)
					want.MatchConditions = append(append([]admissionregistrationv1.MatchCondition(nil), ow.MatchConditions...), bypassMarker())
				}
				want.FailurePolicy = policyIgnore
				require.Equal(t, want, got, "only the breaker's fields differ for %s; %s", n, msg)
			}
		}

		letters := []byte{'H', 'H', 'F', 'F', 'U'}
		for i := 0; i < length; i++ {
			step(map[string]byte{whA: letters[rng.Intn(len(letters))], whB: letters[rng.Intn(len(letters))]})
		}
		for i := 0; i < 4; i++ {
			step(map[string]byte{whA: 'H', whB: 'H'})
		}
		require.False(t, modelOpen[whA] || modelOpen[whB], "the model closed both circuits")
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
	base := newConfig(newWebhook(whA, policyFail, mc("x")), newWebhook(whOther, policyFail))
	tgts := []config.Target{target(whA, config.ModeBypass, 3, 3)}
	cases := map[string]struct {
		overwrite  func(*admissionregistrationv1.MutatingWebhookConfiguration)
		original   *admissionregistrationv1.FailurePolicyType
		wantPolicy *admissionregistrationv1.FailurePolicyType
	}{
		"failurePolicy set back to Fail: theirs stands, the breaker's marker goes": {
			overwrite: func(m *admissionregistrationv1.MutatingWebhookConfiguration) {
				m.Webhooks[0].FailurePolicy = policyFail
			},
			original:   policyFail,
			wantPolicy: policyFail,
		},
		"only the bypass marker removed: the breaker's Ignore goes, the original Fail is back": {
			overwrite:  func(m *admissionregistrationv1.MutatingWebhookConfiguration) { circuit.RemoveBypass(&m.Webhooks[0]) },
			original:   policyFail,
			wantPolicy: policyFail,
		},
		"only the bypass marker removed: an unset original stays unset": {
			overwrite:  func(m *admissionregistrationv1.MutatingWebhookConfiguration) { circuit.RemoveBypass(&m.Webhooks[0]) },
			original:   nil,
			wantPolicy: nil,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cur := withEntries(t, base, circuit.Record{whA: entryFor(config.ModeBypass, tc.original)})
			tc.overwrite(cur)
			want := cur.DeepCopy()
			circuit.RemoveBypass(&want.Webhooks[0])
			want.Webhooks[0].FailurePolicy = tc.wantPolicy

			next, changes := plan(t, cur, Inputs{Targets: tgts, Counts: map[string]Counts{whA: failing(1, probe.ReasonTimeout)}})
			require.Equal(t, map[string]ChangeKind{whA: Overwritten}, kinds(changes))
			assert.Equal(t, want.Webhooks, next.Webhooks)
			assert.NotContains(t, next.Annotations, circuit.Annotation)
		})
	}
}

// TestPlan_unprobeableWhileOpen_closes: a target that can no longer be
// probed would otherwise stay open for good.
func TestPlan_unprobeableWhileOpen_closes(t *testing.T) {
	base := newConfig(newWebhook(whA, policyFail, mc("x")))
	tgts := []config.Target{target(whA, config.ModeBypass, 3, 3)}
	open := withEntries(t, base, circuit.Record{whA: entryFor(config.ModeBypass, policyFail)})
	next, changes := plan(t, open, Inputs{Targets: tgts, Unprobeable: map[string]string{whA: "sideEffects is Some"}})
	require.Equal(t, map[string]ChangeKind{whA: Closed}, kinds(changes))
	assert.Contains(t, changes[0].Message, "can no longer be probed (sideEffects is Some)")
	assert.Equal(t, base.Webhooks, next.Webhooks, "the original is restored exactly")
	assert.NotContains(t, next.Annotations, circuit.Annotation)

	// A closed one stays closed, whatever its counts say.
	_, changes = plan(t, base, Inputs{Targets: tgts, Counts: map[string]Counts{whA: failing(5, probe.ReasonTimeout)}, Unprobeable: map[string]string{whA: "x"}})
	assert.Empty(t, changes)
}

// TestPlan_anotherInstallationsEntryIsLeftAlone: an entry signed by
// another breaker identity (a second installation) is neither closed,
// dropped, handed off nor counted as this breaker's circuit.
func TestPlan_anotherInstallationsEntryIsLeftAlone(t *testing.T) {
	base := newConfig(newWebhook(whA, policyFail, mc("x")), newWebhook(whB, policyFail))
	theirs := entryFor(config.ModeBypass, policyFail)
	theirs.By = "system:serviceaccount:canary:webhook-guard"
	cur := withEntries(t, base, circuit.Record{whA: theirs})
	for name, in := range map[string]Inputs{
		"a healthy target":      {Targets: []config.Target{target(whA, config.ModeBypass, 1, 1)}, Counts: map[string]Counts{whA: healthy(5)}},
		"not a target":          {Targets: []config.Target{target(whB, config.ModeBypass, 1, 1)}},
		"an unprobeable target": {Targets: []config.Target{target(whA, config.ModeBypass, 1, 1)}, Unprobeable: map[string]string{whA: "x"}},
	} {
		t.Run(name, func(t *testing.T) {
			in.Signer = "system:serviceaccount:main:webhook-guard"
			_, changes := plan(t, cur, in)
			assert.Empty(t, changes)
		})
	}
	withOverride := cur.DeepCopy()
	withOverride.Annotations[circuit.OverrideAnnotation] = "mine now"
	_, changes := plan(t, withOverride, Inputs{Signer: "system:serviceaccount:main:webhook-guard"})
	assert.Empty(t, changes, "the other installation hands off its own entry")

	opened, changes := plan(t, base, Inputs{Signer: "me", Now: testNow, Targets: []config.Target{target(whB, config.ModeIgnore, 1, 1)}, Counts: map[string]Counts{whB: failing(1, probe.ReasonTimeout)}})
	require.Len(t, changes, 1)
	assert.Equal(t, "me", mustRecord(t, opened)[whB].By, "new entries are signed")
}

// TestPlan_unreadableRecord: nothing is guessed, and the override still
// hands the configuration over.
func TestPlan_unreadableRecord(t *testing.T) {
	base := newConfig(newWebhook(whA, policyFail, mc("x")))
	tgts := []config.Target{target(whA, config.ModeBypass, 1, 1)}
	cur := withEntries(t, base, circuit.Record{whA: entryFor(config.ModeBypass, policyFail)})
	cur.Annotations[circuit.Annotation] = `{garbage`
	_, _, err := Plan(cur, Inputs{Targets: tgts, Counts: map[string]Counts{whA: healthy(3)}})
	require.Error(t, err, "without a readable record nothing is changed, not even a close")

	cur.Annotations[circuit.OverrideAnnotation] = "INC-7: fixing it by hand"
	next, changes := plan(t, cur, Inputs{Targets: tgts, Counts: map[string]Counts{whA: healthy(3)}})
	require.Len(t, changes, 1)
	assert.Equal(t, HandedOff, changes[0].Kind)
	assert.NotContains(t, next.Annotations, circuit.Annotation)
	assert.Equal(t, policyIgnore, next.Webhooks[0].FailurePolicy, "failurePolicy stays as it is")
	assert.Equal(t, []admissionregistrationv1.MatchCondition{mc("x")}, next.Webhooks[0].MatchConditions, "only the bypass marker goes")
}

// BenchmarkPlan_openAndClose measures one open and one close decision on a
// configuration with two webhooks, record encoding included.
func BenchmarkPlan_openAndClose(b *testing.B) {
	base := newConfig(newWebhook(whA, policyFail, mc("x")), newWebhook(whOther, policyFail))
	tgts := []config.Target{target(whA, config.ModeBypass, 3, 3)}
	open := Inputs{Targets: tgts, Counts: map[string]Counts{whA: failing(3, probe.ReasonTimeout)}}
	closeIn := Inputs{Targets: tgts, Counts: map[string]Counts{whA: healthy(3)}}
	for b.Loop() {
		opened, _, err := Plan(base, open)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := Plan(opened, closeIn); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlan_noChange is the steady state: the reconciler decides that
// nothing is to be written.
func BenchmarkPlan_noChange(b *testing.B) {
	base := newConfig(newWebhook(whA, policyFail, mc("x")), newWebhook(whOther, policyFail))
	in := Inputs{Targets: []config.Target{target(whA, config.ModeBypass, 3, 3)}, Counts: map[string]Counts{whA: healthy(3)}}
	for b.Loop() {
		if _, _, err := Plan(base, in); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPlan_override_handOffKeepsTheOriginal: the handoff removes the
// entry, the only place the original failurePolicy was kept, so the
// HandedOff Event says what it was, how the circuit was open and since
// when, whatever the length of the override's reason.
func TestPlan_override_handOffKeepsTheOriginal(t *testing.T) {
	base := newConfig(newWebhook(whA, policyFail, mc("x")), newWebhook(whB, nil))
	bypass := entryFor(config.ModeBypass, policyFail)
	bypass.By = "system:serviceaccount:main:webhook-guard"
	ignore := entryFor(config.ModeIgnore, nil)
	ignore.By = bypass.By
	for name, tc := range map[string]struct {
		webhook, reason string
		entry           circuit.Entry
		want            string
	}{
		"a Bypass circuit over Fail names Fail, the mode and the opening": {
			webhook: whA, reason: "INC-42", entry: bypass,
			want: "original failurePolicy Fail, mode Bypass, opened at 2025-01-01T00:00:00Z by system:serviceaccount:main:webhook-guard",
		},
		"an Ignore circuit over an unset failurePolicy says unset": {
			webhook: whB, reason: "INC-42", entry: ignore,
			want: "original failurePolicy unset, mode Ignore, opened at 2025-01-01T00:00:00Z",
		},
		"a reason longer than an Event note does not push the original out": {
			webhook: whA, reason: strings.Repeat("very long reason ", 200), entry: bypass,
			want: "original failurePolicy Fail, mode Bypass, opened at 2025-01-01T00:00:00Z",
		},
	} {
		t.Run(name, func(t *testing.T) {
			cur := withEntries(t, base, circuit.Record{tc.webhook: tc.entry})
			cur.Annotations[circuit.OverrideAnnotation] = tc.reason
			next, changes := plan(t, cur, Inputs{Signer: bypass.By})
			require.Len(t, changes, 1)
			assert.Equal(t, HandedOff, changes[0].Kind)
			assert.Contains(t, changes[0].Message, tc.want)
			assert.Contains(t, changes[0].Message, "failurePolicy stays Ignore as it is now")
			assert.LessOrEqual(t, len(changes[0].Message), circuit.EventNoteLimit, "kube-apiserver rejects a longer Event")
			assert.NotContains(t, next.Annotations, circuit.Annotation, "the record still goes")
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
	base := newConfig(newWebhook(whA, policyFail, mc("x")), newWebhook(whB, policyFail), newWebhook(whOther, nil), newWebhook(whMissing, policyFail))
	cur := withEntries(t, base, circuit.Record{
		whA:       signed(entryFor(config.ModeBypass, policyFail), old),
		whB:       signed(entryFor(config.ModeIgnore, policyFail), live),
		whOther:   signed(entryFor(config.ModeIgnore, nil), me),
		whMissing: entryFor(config.ModeIgnore, policyFail),
	})

	next, changes, err := TakeOver(cur, me, map[string]string{old: "its Lease old/webhook-guard.webhook-guard.io was released"})
	require.NoError(t, err)
	require.Len(t, changes, 1)
	assert.Equal(t, Takeover{Webhook: whA, From: old, Message: "webhook-guard " + me + " took over the open circuit on " + whA + " from " + old +
		", which no longer runs (its Lease old/webhook-guard.webhook-guard.io was released); from now on it closes the circuit as its own " +
		"(original failurePolicy Fail, mode Bypass, opened at 2025-01-01T00:00:00Z by " + old + ")"}, changes[0])
	rec := mustRecord(t, next)
	assert.Equal(t, me, rec[whA].By)
	assert.Equal(t, live, rec[whB].By, "a live installation's entry is not taken")
	assert.Equal(t, me, rec[whOther].By)
	assert.Empty(t, rec[whMissing].By, "an unsigned entry is already every breaker's")
	want := mustRecord(t, cur)
	want[whA] = signed(want[whA], me)
	assert.Equal(t, want, rec, "only the signature changes")
	assert.Equal(t, withoutCircuit(cur), withoutCircuit(next), "nothing but the record changes")

	closed, closing := plan(t, next, Inputs{Signer: me, Targets: []config.Target{target(whA, config.ModeBypass, 1, 1)}, Counts: map[string]Counts{whA: healthy(1)}})
	assert.Equal(t, Closed, kinds(closing)[whA], "the new identity closes what it took over")
	assert.Equal(t, base.Webhooks[0], closed.Webhooks[0])

	same, none, err := TakeOver(next, me, map[string]string{old: "gone"})
	require.NoError(t, err)
	assert.Empty(t, none)
	assert.Same(t, next, same, "nothing to take over, nothing to write")

	broken := cur.DeepCopy()
	broken.Annotations[circuit.Annotation] = "{garbage"
	_, _, err = TakeOver(broken, me, map[string]string{old: "gone"})
	assert.Error(t, err, "an unreadable record is not guessed at")
}
