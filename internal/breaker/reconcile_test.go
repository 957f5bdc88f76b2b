package breaker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakermetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
)

const testIdentity = "system:serviceaccount:webhook-guard-system:webhook-guard"

// canary answers the marking canary as kube-apiserver would: after the
// first notYet calls, every marking policy of circuits is loaded, and
// armed while the configuration it reads holds an entry for its webhook,
// in the record or the arming entries.
type canary struct {
	// err, when set, is every canary's answer: a failing webhook that
	// intercepts Events refuses it.
	err           error
	notYet, calls int
	circuits      []marking.Circuit
	reader        client.Reader
}

func (c *canary) Create(ctx context.Context, e *corev1.Event, _ metav1.CreateOptions) (*corev1.Event, error) {
	c.calls++
	if c.err != nil {
		return nil, c.err
	}
	out := e.DeepCopy()
	if c.calls <= c.notYet {
		return out, nil
	}
	out.Annotations = map[string]string{}
	for _, cc := range c.circuits {
		out.Annotations[marking.LoadedAnnotation(cc.Configuration, cc.Webhook)] = marking.Digest(cc.Configuration, cc.Webhook)
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.reader.Get(ctx, client.ObjectKey{Name: cc.Configuration}, mwc); err != nil {
			return nil, err
		}
		rec, _ := circuit.Decode(mwc.Annotations)
		armed, _ := circuit.DecodeArming(mwc.Annotations)
		if rec[cc.Webhook].UID == mwc.UID || armed[cc.Webhook].UID == mwc.UID {
			out.Annotations[marking.ArmedAnnotation(cc.Configuration, cc.Webhook)] = "true"
		}
	}
	return out, nil
}

// TestConfigurationReconciler_armsMarkingAroundEachTransition: ten webhooks of
// one configuration failing at once are armed in one write, open in one
// write once one canary shows all ten policies marking, and the reconcile
// that waits returns at once with a requeue instead of holding a worker.
// Closing moves the entries from the record to the arming entries, which
// a write removes circuit.DisarmAfter later. The service writes no policy.
func TestConfigurationReconciler_armsMarkingAroundEachTransition(t *testing.T) {
	var hooks []admissionregistrationv1.MutatingWebhook
	var targets []config.Target
	var objs []client.Object
	c := &canary{notYet: 1}
	for i := range 10 {
		name := fmt.Sprintf("w%d.pod-defaults.example.com", i)
		hooks = append(hooks, breakertest.Webhook(name, breakertest.PolicyFail))
		targets = append(targets, breakertest.Target(name, config.ModeIgnore, 3, 2))
		policy, binding := marking.Render(breakertest.ConfigName, name)
		objs = append(objs, policy, binding)
		c.circuits = append(c.circuits, marking.Circuit{Configuration: breakertest.ConfigName, Webhook: name})
	}
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(objs, breakertest.Config(hooks...))...).Build()
	c.reader = cl
	state := NewState()
	for _, tgt := range targets {
		state.Register(tgt.Key())
		for range 3 {
			state.Observe(tgt.Key(), breakertest.FailedResult("timeout"), time.Now())
		}
	}
	clock := clocktesting.NewFakeClock(time.Now())
	r := &ConfigurationReconciler{
		Kind: circuit.KindMutating, Client: cl, Targets: targets, State: state,
		Recorder: events.NewFakeRecorder(100), Metrics: breakermetrics.NewMetrics(), Signer: testIdentity, Clock: clock,
		Marker: &marking.Keeper{Reader: cl, Canary: c, CanaryGap: time.Nanosecond},
	}
	ctx := context.Background()
	req := ctrl.Request{}
	req.Name = breakertest.ConfigName
	get := func() *admissionregistrationv1.MutatingWebhookConfiguration {
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: breakertest.ConfigName}, mwc))
		return mwc
	}
	armed := func() circuit.Record {
		rec, err := circuit.DecodeArming(get().Annotations)
		require.NoError(t, err)
		return rec
	}

	t.Run("the first reconcile arms all ten in one write, and opens nothing", func(t *testing.T) {
		rv := get().ResourceVersion
		res, err := r.Reconcile(ctx, req)
		require.NoError(t, err)
		assert.Equal(t, decide.MarkingPoll, res.RequeueAfter)
		assert.Equal(t, 0, openCount(t, cl))
		assert.Len(t, armed(), 10)
		assert.Zero(t, c.calls, "no canary before the arming write")
		assert.NotEqual(t, rv, get().ResourceVersion)
		_, hasRecord := get().Annotations[circuit.Annotation]
		assert.False(t, hasRecord, "the arming write records no circuit")
	})
	t.Run("while kube-apiserver does not show the policies armed, the opening waits", func(t *testing.T) {
		res, err := r.Reconcile(ctx, req)
		require.NoError(t, err)
		assert.Equal(t, decide.MarkingPoll, res.RequeueAfter)
		assert.Equal(t, 0, openCount(t, cl))
		assert.Equal(t, 1, c.calls, "one canary for all ten policies")
	})
	t.Run("once they are, all ten open in one write, which moves the entries to the record", func(t *testing.T) {
		res, err := r.Reconcile(ctx, req)
		require.NoError(t, err)
		assert.Zero(t, res.RequeueAfter)
		assert.Equal(t, 10, openCount(t, cl))
		assert.Equal(t, 2, c.calls)
		assert.Empty(t, armed(), "the record arms them now")
		rec, err := circuit.Decode(get().Annotations)
		require.NoError(t, err)
		assert.Len(t, rec, 10)
	})
	t.Run("closing moves the entries back to the arming entries", func(t *testing.T) {
		before, err := circuit.Decode(get().Annotations)
		require.NoError(t, err)
		for _, tgt := range targets {
			for range 2 {
				state.Observe(tgt.Key(), breakertest.HealthyResult(), time.Now())
			}
		}
		res, err := r.Reconcile(ctx, req)
		require.NoError(t, err)
		assert.Equal(t, 0, openCount(t, cl))
		assert.Equal(t, before, armed(), "every closed circuit's entry, as it was recorded")
		assert.Equal(t, circuit.DisarmAfter, res.RequeueAfter)
	})
	t.Run("circuit.DisarmAfter later, a write removes them", func(t *testing.T) {
		clock.Step(circuit.DisarmAfter / 2)
		res, err := r.Reconcile(ctx, req)
		require.NoError(t, err)
		assert.Len(t, armed(), 10, "not yet")
		assert.Equal(t, circuit.DisarmAfter/2, res.RequeueAfter)
		clock.Step(circuit.DisarmAfter / 2)
		res, err = r.Reconcile(ctx, req)
		require.NoError(t, err)
		assert.Zero(t, res.RequeueAfter)
		got := get()
		assert.NotContains(t, got.Annotations, circuit.ArmingAnnotation)
		assert.Equal(t, map[string]string{"keep": "me"}, got.Annotations, "nothing of the breaker's is left")
	})
	policies := &admissionregistrationv1.MutatingAdmissionPolicyList{}
	require.NoError(t, cl.List(ctx, policies))
	for _, p := range policies.Items {
		assert.Equal(t, "999", p.ResourceVersion, "policy %s was written by the service", p.Name)
	}
}

// An opening armed but no longer wanted (the webhook recovered before
// kube-apiserver showed the policy armed) leaves no arming entry behind:
// it is removed circuit.DisarmAfter after the breaker saw it.
func TestConfigurationReconciler_anAbandonedArmingIsRemoved(t *testing.T) {
	policy, binding := marking.Render(breakertest.ConfigName, breakertest.WhA)
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(policy, binding, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail))).Build()
	tgt := breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2)
	state := NewState()
	state.Register(tgt.Key())
	for range 3 {
		state.Observe(tgt.Key(), breakertest.FailedResult("timeout"), time.Now())
	}
	c := &canary{notYet: 100, reader: cl, circuits: []marking.Circuit{{Configuration: breakertest.ConfigName, Webhook: breakertest.WhA}}}
	clock := clocktesting.NewFakeClock(time.Now())
	r := &ConfigurationReconciler{
		Kind: circuit.KindMutating, Client: cl, Targets: []config.Target{tgt}, State: state,
		Recorder: events.NewFakeRecorder(10), Metrics: breakermetrics.NewMetrics(), Signer: testIdentity, Clock: clock,
		Marker: &marking.Keeper{Reader: cl, Canary: c, CanaryGap: time.Nanosecond},
	}
	ctx := context.Background()
	req := ctrl.Request{}
	req.Name = breakertest.ConfigName
	for range 2 { // arm, then wait for the canary
		_, err := r.Reconcile(ctx, req)
		require.NoError(t, err)
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: breakertest.ConfigName}, mwc))
	require.Contains(t, mwc.Annotations, circuit.ArmingAnnotation)

	state.Observe(tgt.Key(), breakertest.HealthyResult(), time.Now()) // recovered
	res, err := r.Reconcile(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, circuit.DisarmAfter, res.RequeueAfter)
	clock.Step(circuit.DisarmAfter)
	_, err = r.Reconcile(ctx, req)
	require.NoError(t, err)
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: breakertest.ConfigName}, mwc))
	assert.Equal(t, map[string]string{"keep": "me"}, mwc.Annotations)
	assert.Equal(t, 0, openCount(t, cl))
}

// A marking policy that is missing holds the opening back, for at most
// markingBound: a MarkingFailed Event naming the command that installs it,
// once, and nothing written; then the circuit opens all the same, and its
// CircuitOpened Event says marking was not confirmed, and why.
func TestConfigurationReconciler_aMissingMarkingPolicyHoldsTheOpeningForABound(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail))).Build()
	tgt := breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2)
	state := NewState()
	state.Register(tgt.Key())
	for range 3 {
		state.Observe(tgt.Key(), breakertest.FailedResult("timeout"), time.Now())
	}
	rec := events.NewFakeRecorder(10)
	c := &canary{}
	clock := clocktesting.NewFakeClock(time.Now())
	r := &ConfigurationReconciler{
		Kind: circuit.KindMutating, Client: cl, Targets: []config.Target{tgt}, State: state,
		Recorder: rec, Metrics: breakermetrics.NewMetrics(), Signer: testIdentity, Clock: clock,
		Marker: &marking.Keeper{Reader: cl, Canary: c, CanaryGap: time.Nanosecond},
	}
	req := ctrl.Request{}
	req.Name = breakertest.ConfigName
	bound := decide.MarkingBound(r.Targets, []string{breakertest.WhA})
	for elapsed := time.Duration(0); elapsed < bound; elapsed += decide.MarkingPoll {
		res, err := r.Reconcile(context.Background(), req)
		require.NoError(t, err)
		assert.Positive(t, res.RequeueAfter, "looked at again while it waits")
		assert.Equal(t, 0, openCount(t, cl), "opened after %s, before its bound %s", elapsed, bound)
		clock.Step(decide.MarkingPoll)
	}
	assert.Zero(t, c.calls, "no canary for a policy that is not there")
	require.Len(t, rec.Events, 1, "one MarkingFailed Event per opening, not one per look")
	event := <-rec.Events
	assert.Contains(t, event, "MarkingFailed")
	assert.Contains(t, event, "guard manifests marking")

	_, err := r.Reconcile(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, 1, openCount(t, cl), "the opening waited out its bound and went")
	require.Len(t, rec.Events, 1)
	event = <-rec.Events
	assert.Contains(t, event, string(decide.Opened))
	assert.Contains(t, event, "marking not confirmed: the marking policy of")
	assert.Equal(t, 1.0, testutil.ToFloat64(r.Metrics.MarkingUnconfirmed.WithLabelValues(string(circuit.KindMutating), breakertest.ConfigName, breakertest.WhA)))
}

func openCount(t *testing.T, c client.Client) int {
	t.Helper()
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: breakertest.ConfigName}, mwc))
	n := 0
	for _, w := range mwc.Webhooks {
		if *w.FailurePolicy == admissionregistrationv1.Ignore {
			n++
		}
	}
	return n
}

// A configuration handed to its administrators (the override annotation)
// keeps its record entries, marked handed off: the handoff's write removes
// the bypass, and the entry, still in the record, marks objects (its
// failurePolicy stays Ignore, so they may still be admitted without the
// webhook), which an arming entry did; then the breaker writes nothing
// more.
func TestConfigurationReconciler_aHandoffKeepsItsEntryMarkingAndThenWritesNothing(t *testing.T) {
	policy, binding := marking.Render(breakertest.ConfigName, breakertest.WhA)
	mwc := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyIgnore, breakertest.BypassMarker()))
	entry := circuit.Entry{UID: breakertest.UID, Mode: circuit.ModeBypass, OpenedAt: metav1.Now(), Reason: "timeout", OriginalFailurePolicy: breakertest.PolicyFail, By: testIdentity}
	var err error
	mwc.Annotations, err = circuit.Encode(mwc.Annotations, circuit.Record{breakertest.WhA: entry})
	require.NoError(t, err)
	mwc.Annotations, err = circuit.EncodeArming(mwc.Annotations, circuit.Record{breakertest.WhA: entry})
	require.NoError(t, err)
	mwc.Annotations[circuit.OverrideAnnotation] = "the platform team takes over"
	r, cl, clock := armedReconciler(t, policy, binding, mwc)
	ctx := context.Background()
	req := ctrl.Request{}
	req.Name = breakertest.ConfigName
	_, err = r.Reconcile(ctx, req)
	require.NoError(t, err)
	handedOff := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: breakertest.ConfigName}, handedOff))
	assert.Empty(t, handedOff.Webhooks[0].MatchConditions, "the bypass goes with the handoff")
	rec, err := circuit.Decode(handedOff.Annotations)
	require.NoError(t, err)
	require.Contains(t, rec, breakertest.WhA, "the entry stays, with its original")
	assert.True(t, rec[breakertest.WhA].HandedOff())
	armed, err := circuit.DecodeArming(handedOff.Annotations)
	require.NoError(t, err)
	assert.NotContains(t, armed, breakertest.WhA, "the kept entry marks, as an arming entry would")

	clock.Step(circuit.DisarmAfter)
	res, err := r.Reconcile(ctx, req)
	require.NoError(t, err)
	assert.Zero(t, res.RequeueAfter)
	again := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: breakertest.ConfigName}, again))
	assert.Equal(t, handedOff.ResourceVersion, again.ResourceVersion, "written once")
}

// Another installation's arming entries on a configuration this breaker
// reconciles (it carries a record) are left alone: no write, ever.
func TestConfigurationReconciler_anotherInstallationsArmingIsLeftAlone(t *testing.T) {
	mwc := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail))
	entry := circuit.Entry{UID: breakertest.UID, Mode: circuit.ModeBypass, OpenedAt: metav1.Now(), Reason: "timeout", OriginalFailurePolicy: breakertest.PolicyFail, By: "system:serviceaccount:elsewhere:webhook-guard"}
	var err error
	mwc.Annotations, err = circuit.EncodeArming(mwc.Annotations, circuit.Record{breakertest.WhA: entry})
	require.NoError(t, err)
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mwc).Build()
	clock := clocktesting.NewFakeClock(time.Now())
	r := &ConfigurationReconciler{
		Kind: circuit.KindMutating, Client: cl, State: NewState(),
		Recorder: events.NewFakeRecorder(10), Metrics: breakermetrics.NewMetrics(), Signer: testIdentity, Clock: clock,
		Marker: &marking.Keeper{Reader: cl, Canary: &canary{reader: cl}, CanaryGap: time.Nanosecond},
	}
	ctx := context.Background()
	req := ctrl.Request{}
	req.Name = breakertest.ConfigName
	before := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: breakertest.ConfigName}, before))
	for range 2 {
		res, err := r.Reconcile(ctx, req)
		require.NoError(t, err)
		assert.Zero(t, res.RequeueAfter)
		clock.Step(circuit.DisarmAfter)
	}
	after := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: breakertest.ConfigName}, after))
	assert.Equal(t, before.ResourceVersion, after.ResourceVersion)
}

// Openings that reach their threshold one after another, as in a mass
// failure, cost one write each step: a webhook whose marking
// kube-apiserver already shows armed opens in the same write that arms
// the next one's.
func TestConfigurationReconciler_anOpeningArmsTheNextInTheSameWrite(t *testing.T) {
	var objs []client.Object
	c := &canary{}
	for _, hook := range []string{breakertest.WhA, breakertest.WhB} {
		policy, binding := marking.Render(breakertest.ConfigName, hook)
		objs = append(objs, policy, binding)
		c.circuits = append(c.circuits, marking.Circuit{Configuration: breakertest.ConfigName, Webhook: hook})
	}
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(objs, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail), breakertest.Webhook(breakertest.WhB, breakertest.PolicyFail)))...).Build()
	c.reader = cl
	a, b := breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2), breakertest.Target(breakertest.WhB, config.ModeBypass, 3, 2)
	state := NewState()
	state.Register(a.Key())
	state.Register(b.Key())
	fail := func(tgt config.Target) {
		for range 3 {
			state.Observe(tgt.Key(), breakertest.FailedResult("timeout"), time.Now())
		}
	}
	r := &ConfigurationReconciler{
		Kind: circuit.KindMutating, Client: cl, Targets: []config.Target{a, b}, State: state,
		Recorder: events.NewFakeRecorder(100), Metrics: breakermetrics.NewMetrics(), Signer: testIdentity,
		Clock: clocktesting.NewFakeClock(time.Now()), Marker: &marking.Keeper{Reader: cl, Canary: c, CanaryGap: time.Nanosecond},
	}
	ctx := context.Background()
	req := ctrl.Request{}
	req.Name = breakertest.ConfigName
	get := func() (rec, armed circuit.Record, rv string) {
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: breakertest.ConfigName}, mwc))
		rec, err := circuit.Decode(mwc.Annotations)
		require.NoError(t, err)
		armed, err = circuit.DecodeArming(mwc.Annotations)
		require.NoError(t, err)
		return rec, armed, mwc.ResourceVersion
	}

	fail(a)
	_, err := r.Reconcile(ctx, req)
	require.NoError(t, err)
	rec, armed, _ := get()
	require.Empty(t, rec)
	require.Contains(t, armed, breakertest.WhA, "a is armed")

	fail(b)
	_, err = r.Reconcile(ctx, req)
	require.NoError(t, err)
	rec, armed, rv := get()
	assert.Contains(t, rec, breakertest.WhA, "a opened")
	assert.NotContains(t, rec, breakertest.WhB, "b is not shown armed yet")
	assert.Contains(t, armed, breakertest.WhB, "b was armed in the write that opened a")
	assert.NotContains(t, armed, breakertest.WhA, "a's entry moved to the record")

	_, err = r.Reconcile(ctx, req)
	require.NoError(t, err)
	rec, armed, rv2 := get()
	assert.Contains(t, rec, breakertest.WhB, "b opened")
	assert.Empty(t, armed)
	assert.NotEqual(t, rv, rv2)
}

// Closings spread over time are disarmed together, circuit.DisarmAfter after the
// latest of them: one write, however many closed.
func TestConfigurationReconciler_closingsAreDisarmedInOneWrite(t *testing.T) {
	entry := circuit.Entry{UID: breakertest.UID, Mode: circuit.ModeBypass, OpenedAt: metav1.Now(), Reason: "timeout", OriginalFailurePolicy: breakertest.PolicyFail, By: testIdentity}
	mwc := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyIgnore, breakertest.BypassMarker()), breakertest.Webhook(breakertest.WhB, breakertest.PolicyIgnore, breakertest.BypassMarker()))
	var err error
	mwc.Annotations, err = circuit.Encode(mwc.Annotations, circuit.Record{breakertest.WhA: entry, breakertest.WhB: entry})
	require.NoError(t, err)
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mwc).Build()
	a, b := breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2), breakertest.Target(breakertest.WhB, config.ModeBypass, 3, 2)
	state := NewState()
	state.Register(a.Key())
	state.Register(b.Key())
	heal := func(tgt config.Target) {
		for range 2 {
			state.Observe(tgt.Key(), breakertest.HealthyResult(), time.Now())
		}
	}
	clock := clocktesting.NewFakeClock(time.Now())
	r := &ConfigurationReconciler{
		Kind: circuit.KindMutating, Client: cl, Targets: []config.Target{a, b}, State: state,
		Recorder: events.NewFakeRecorder(100), Metrics: breakermetrics.NewMetrics(), Signer: testIdentity, Clock: clock,
		Marker: &marking.Keeper{Reader: cl, Canary: &canary{reader: cl}, CanaryGap: time.Nanosecond},
	}
	ctx := context.Background()
	req := ctrl.Request{}
	req.Name = breakertest.ConfigName
	armed := func() (circuit.Record, string) {
		got := &admissionregistrationv1.MutatingWebhookConfiguration{}
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: breakertest.ConfigName}, got))
		rec, err := circuit.DecodeArming(got.Annotations)
		require.NoError(t, err)
		return rec, got.ResourceVersion
	}

	heal(a)
	_, err = r.Reconcile(ctx, req)
	require.NoError(t, err)
	clock.Step(circuit.DisarmAfter / 2)
	heal(b)
	_, err = r.Reconcile(ctx, req)
	require.NoError(t, err)
	rec, _ := armed()
	require.Len(t, rec, 2, "both closed, both armed")

	clock.Step(circuit.DisarmAfter / 2)
	res, err := r.Reconcile(ctx, req)
	require.NoError(t, err)
	rec, rv := armed()
	assert.Len(t, rec, 2, "a's grace is over, b's is not: both wait")
	assert.Equal(t, circuit.DisarmAfter/2, res.RequeueAfter)

	clock.Step(circuit.DisarmAfter / 2)
	_, err = r.Reconcile(ctx, req)
	require.NoError(t, err)
	rec, rv2 := armed()
	assert.Empty(t, rec)
	assert.NotEqual(t, rv, rv2)
}

// The disarm grace is a margin on the guard's clock, and the arming
// annotation is no owned field: an operator (or a GitOps tool) that strips
// it during the grace disarms marking at once, and the breaker does not
// write it back; it only stops waiting for it. docs/how-it-works.md
// states this limit.
func TestConfigurationReconciler_anArmingEntryStrippedInItsGraceStaysStripped(t *testing.T) {
	policy, binding := marking.Render(breakertest.ConfigName, breakertest.WhA)
	mwc := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail))
	entry := circuit.Entry{UID: breakertest.UID, Mode: circuit.ModeBypass, OpenedAt: metav1.Now(), Reason: "timeout", OriginalFailurePolicy: breakertest.PolicyFail, By: testIdentity}
	var err error
	mwc.Annotations, err = circuit.EncodeArming(mwc.Annotations, circuit.Record{breakertest.WhA: entry}) // just closed
	require.NoError(t, err)
	r, cl, clock := armedReconciler(t, policy, binding, mwc)
	ctx := context.Background()
	req := ctrl.Request{}
	req.Name = breakertest.ConfigName
	res, err := r.Reconcile(ctx, req)
	require.NoError(t, err)
	require.Positive(t, res.RequeueAfter, "in its grace")

	stripped := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: breakertest.ConfigName}, stripped))
	delete(stripped.Annotations, circuit.ArmingAnnotation)
	require.NoError(t, cl.Update(ctx, stripped))
	clock.Step(circuit.DisarmAfter / 2)
	res, err = r.Reconcile(ctx, req)
	require.NoError(t, err)
	assert.Zero(t, res.RequeueAfter, "nothing left to wait for")
	got := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: breakertest.ConfigName}, got))
	assert.Equal(t, stripped.ResourceVersion, got.ResourceVersion, "the breaker wrote the stripped entry back")
	assert.NotContains(t, got.Annotations, circuit.ArmingAnnotation)
}

// armedReconciler is a reconciler of one Bypass target (whA) over a fake
// client holding its marking policy, binding and mwc, on a fake clock.
func armedReconciler(t *testing.T, objs ...client.Object) (*ConfigurationReconciler, client.Client, *clocktesting.FakeClock) {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	tgt := breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2)
	state := NewState()
	state.Register(tgt.Key())
	clock := clocktesting.NewFakeClock(time.Now())
	return &ConfigurationReconciler{
		Kind: circuit.KindMutating, Client: cl, Targets: []config.Target{tgt}, State: state,
		Recorder: events.NewFakeRecorder(10), Metrics: breakermetrics.NewMetrics(), Signer: testIdentity, Clock: clock,
		Marker: &marking.Keeper{Reader: cl, Canary: &canary{reader: cl}, CanaryGap: time.Nanosecond},
	}, cl, clock
}
