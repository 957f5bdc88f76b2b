package breaker

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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

const whC = "c.pod-defaults.example.com"

// countingClient counts the writes to the configuration: those that
// change only the arming entries, and the others (transitions).
type countingClient struct {
	client.Client
	arming, transitions int
}

func (c *countingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	before := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(obj), before); err != nil {
		return err
	}
	if err := c.Client.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	after := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(obj), after); err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(before.Webhooks, after.Webhooks) && before.Annotations[circuit.Annotation] == after.Annotations[circuit.Annotation] {
		c.arming++
	} else {
		c.transitions++
	}
	return nil
}

// batchFixture is one mutating configuration of Bypass targets probed
// every second, with their marking policies installed, and a canary that
// answers as kube-apiserver does.
type batchFixture struct {
	t       *testing.T
	cl      *countingClient
	state   *State
	clock   *clocktesting.FakeClock
	canary  *canary
	r       *ConfigurationReconciler
	targets map[string]config.Target
}

// newBatchFixture returns hooks in one configuration, each opening after
// openAfter failures and closing after closeAfter successes; those in
// open have their circuit open.
func newBatchFixture(t *testing.T, hooks []string, openAfter, closeAfter int, open ...string) *batchFixture {
	t.Helper()
	f := &batchFixture{t: t, state: NewState(), clock: clocktesting.NewFakeClock(breakertest.Now), canary: &canary{}, targets: map[string]config.Target{}}
	var objs []client.Object
	var whs []admissionregistrationv1.MutatingWebhook
	var targets []config.Target
	rec := circuit.Record{}
	for _, hook := range hooks {
		policy, binding := marking.Render(breakertest.ConfigName, hook)
		objs = append(objs, policy, binding)
		f.canary.circuits = append(f.canary.circuits, marking.Circuit{Configuration: breakertest.ConfigName, Webhook: hook})
		tgt := breakertest.Target(hook, config.ModeBypass, openAfter, closeAfter)
		tgt.Probe.Interval = time.Second
		targets = append(targets, tgt)
		f.targets[hook] = tgt
		f.state.Register(tgt.Key())
		whs = append(whs, breakertest.Webhook(hook, breakertest.PolicyFail))
	}
	for _, hook := range open {
		rec[hook] = circuit.Entry{UID: breakertest.UID, Mode: circuit.ModeBypass, OpenedAt: metav1.NewTime(breakertest.Now.Add(-time.Minute)), Reason: "timeout", Signal: decide.SignalProbe, OriginalFailurePolicy: breakertest.PolicyFail, By: testIdentity}
	}
	mwc := breakertest.Config(whs...)
	if len(rec) > 0 {
		mwc = breakertest.WithEntries(t, mwc, rec)
	}
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	f.cl = &countingClient{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(objs, mwc)...).Build()}
	f.canary.reader = f.cl
	f.r = &ConfigurationReconciler{
		Kind: circuit.KindMutating, Client: f.cl, Targets: targets, State: f.state,
		Recorder: events.NewFakeRecorder(1000), Metrics: breakermetrics.NewMetrics(), Signer: testIdentity, Clock: f.clock,
		Marker: &marking.Keeper{Reader: f.cl, Canary: f.canary, CanaryGap: time.Nanosecond},
	}
	return f
}

func (f *batchFixture) fail(hook string, n int) {
	for range n {
		f.state.Observe(f.targets[hook].Key(), breakertest.FailedResult("timeout"), f.clock.Now())
	}
}

func (f *batchFixture) heal(hook string, n int) {
	for range n {
		f.state.Observe(f.targets[hook].Key(), breakertest.HealthyResult(), f.clock.Now())
	}
}

func (f *batchFixture) reconcile() ctrl.Result {
	f.t.Helper()
	req := ctrl.Request{}
	req.Name = breakertest.ConfigName
	res, err := f.r.Reconcile(context.Background(), req)
	require.NoError(f.t, err)
	return res
}

func (f *batchFixture) get() *admissionregistrationv1.MutatingWebhookConfiguration {
	f.t.Helper()
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(f.t, f.cl.Get(context.Background(), client.ObjectKey{Name: breakertest.ConfigName}, mwc))
	return mwc
}

// record and armed are the webhooks with a record entry, and with an
// arming entry.
func (f *batchFixture) record() []string {
	f.t.Helper()
	rec, err := circuit.Decode(f.get().Annotations)
	require.NoError(f.t, err)
	return rec.Webhooks()
}

func (f *batchFixture) armed() []string {
	f.t.Helper()
	rec, err := circuit.DecodeArming(f.get().Annotations)
	require.NoError(f.t, err)
	return rec.Webhooks()
}

func (f *batchFixture) inputs() decide.Inputs {
	return f.state.Inputs(f.r.Targets, f.clock.Now(), testIdentity, "3")
}

// A target one failure from its threshold is armed ahead, with every
// sibling that is failing too, in one write; when they reach the threshold
// the canary already shows them armed, and the opening is one write. A
// healthy sibling is not armed, and another installation's arming entry
// is left as it is.
func TestConfigurationReconciler_armsAheadOfTheThreshold(t *testing.T) {
	f := newBatchFixture(t, []string{breakertest.WhA, breakertest.WhB, whC, breakertest.WhOther}, 3, 2)
	foreign := circuit.Entry{UID: breakertest.UID, Mode: circuit.ModeBypass, OpenedAt: metav1.Now(), Reason: "timeout", OriginalFailurePolicy: breakertest.PolicyFail, By: "system:serviceaccount:elsewhere:webhook-guard"}
	mwc := f.get()
	var err error
	mwc.Annotations, err = circuit.EncodeArming(mwc.Annotations, circuit.Record{breakertest.WhOther: foreign})
	require.NoError(t, err)
	require.NoError(t, f.cl.Client.Update(context.Background(), mwc))
	foreignArming := f.get().Annotations[circuit.ArmingAnnotation]

	f.fail(breakertest.WhA, 2)
	f.fail(breakertest.WhB, 1)
	assert.True(t, decide.ArmsAhead(decide.Read(f.get()), f.inputs()), "the probe runner wakes the reconciler")
	res := f.reconcile()
	assert.Equal(t, []string{breakertest.WhA, breakertest.WhB, breakertest.WhOther}, f.armed(), "a at openAfter-1, and b, failing too, in one write")
	assert.Equal(t, 1, f.cl.arming)
	assert.Zero(t, f.cl.transitions)
	assert.Empty(t, f.record())
	assert.Zero(t, f.canary.calls, "no canary before a threshold")
	assert.Equal(t, time.Second, res.RequeueAfter, "looks again in one interval, to disarm a recovered one")
	assert.False(t, decide.ArmsAhead(decide.Read(f.get()), f.inputs()), "armed: nothing more to wake for")

	f.reconcile()
	assert.Equal(t, 1, f.cl.arming, "armed once")
	assert.Equal(t, 1, f.canary.calls, "the next reconcile asks the canary before the threshold")
	f.reconcile()
	assert.Equal(t, 1, f.canary.calls, "once: it showed them armed")

	f.clock.Step(time.Second)
	f.fail(breakertest.WhA, 1)
	f.fail(breakertest.WhB, 2)
	res = f.reconcile()
	assert.Equal(t, []string{breakertest.WhA, breakertest.WhB}, f.record(), "both open in one write, at once")
	assert.Equal(t, 1, f.cl.transitions)
	assert.Equal(t, 1, f.cl.arming)
	assert.Equal(t, 1, f.canary.calls, "no canary at the threshold: the one before it showed them armed")
	assert.Equal(t, []string{breakertest.WhOther}, f.armed(), "their entries moved to the record; the other installation's stays")
	assert.Equal(t, foreignArming, f.get().Annotations[circuit.ArmingAnnotation])
	assert.Zero(t, res.RequeueAfter)
	assert.Equal(t, 0, openCountOf(f.get(), whC))
}

// What a canary showed about an arming entry holds only until the breaker
// removes it: an entry armed ahead, abandoned, removed and armed again is
// shown by a new canary before it opens.
func TestConfigurationReconciler_aCanaryAnswerDoesNotOutliveItsEntry(t *testing.T) {
	f := newBatchFixture(t, []string{breakertest.WhA}, 3, 2)
	f.fail(breakertest.WhA, 2)
	f.reconcile() // arms ahead
	f.reconcile() // shown
	require.Equal(t, 1, f.canary.calls)
	f.heal(breakertest.WhA, 1)
	f.clock.Step(circuit.DisarmAfter)
	f.reconcile()
	require.Empty(t, f.armed(), "abandoned and removed")

	f.fail(breakertest.WhA, 2)
	f.reconcile()
	require.Equal(t, []string{breakertest.WhA}, f.armed(), "armed again")
	f.canary.notYet = f.canary.calls + 2 // the next two canaries do not show it
	res := f.reconcile()
	assert.Equal(t, 2, f.canary.calls, "asked again")
	assert.Equal(t, decide.MarkingPoll, res.RequeueAfter)
	f.fail(breakertest.WhA, 1)
	res = f.reconcile()
	assert.Empty(t, f.record(), "not shown armed: the opening waits")
	assert.Equal(t, decide.MarkingPoll, res.RequeueAfter)
	res = f.reconcile()
	assert.Equal(t, []string{breakertest.WhA}, f.record())
	assert.Equal(t, 4, f.canary.calls)
}

// Siblings of one configuration reaching their threshold over one probe
// interval open in one write: the first to cross waits while a sibling is
// one failure away, and its marking, and theirs, are armed meanwhile.
func TestConfigurationReconciler_opensSiblingsInOneWrite(t *testing.T) {
	for name, aheadFirst := range map[string]bool{
		"when nothing woke the reconciler before the first threshold": false,
		"when the reconciler armed them ahead":                        true,
	} {
		t.Run(name, func(t *testing.T) {
			f := newBatchFixture(t, []string{breakertest.WhA, breakertest.WhB, whC}, 3, 2)
			f.fail(breakertest.WhA, 2)
			f.fail(breakertest.WhB, 2)
			f.fail(whC, 2)
			if aheadFirst {
				f.reconcile()
				require.Equal(t, 1, f.cl.arming)
			}
			f.fail(breakertest.WhA, 1)
			res := f.reconcile()
			assert.Empty(t, f.record(), "a waits for b and c")
			assert.Equal(t, []string{breakertest.WhA, breakertest.WhB, whC}, f.armed(), "armed while it waits")
			assert.Equal(t, 1, f.cl.arming)
			assert.Equal(t, time.Second, res.RequeueAfter, "at most one interval")

			f.clock.Step(300 * time.Millisecond)
			f.fail(breakertest.WhB, 1)
			res = f.reconcile()
			assert.Empty(t, f.record(), "c is still one failure away")
			assert.Equal(t, 700*time.Millisecond, res.RequeueAfter, "the bound runs from the first hold")

			f.clock.Step(300 * time.Millisecond)
			f.fail(whC, 1)
			f.reconcile()
			assert.Equal(t, []string{breakertest.WhA, breakertest.WhB, whC}, f.record())
			assert.Empty(t, f.armed())
			assert.Equal(t, 1, f.cl.transitions, "one opening write")
			assert.Equal(t, 1, f.cl.arming, "one arming write")
			rec, err := circuit.Decode(f.get().Annotations)
			require.NoError(t, err)
			assert.Equal(t, rec[breakertest.WhA].OpenedAt, rec[whC].OpenedAt, "one decision time")
		})
	}
}

// A held opening waits at most one probe interval from when it was first
// held: a sibling that stays one failure away is not waited for longer,
// and the opening is not held again after that.
func TestConfigurationReconciler_aHeldOpeningWaitsAtMostOneInterval(t *testing.T) {
	f := newBatchFixture(t, []string{breakertest.WhA, breakertest.WhB}, 3, 2)
	f.fail(breakertest.WhA, 3)
	f.fail(breakertest.WhB, 2)
	res := f.reconcile()
	require.Empty(t, f.record())
	assert.Equal(t, time.Second, res.RequeueAfter)

	f.clock.Step(999 * time.Millisecond)
	res = f.reconcile()
	assert.Empty(t, f.record(), "still within the interval")
	assert.Equal(t, time.Millisecond, res.RequeueAfter)

	f.clock.Step(time.Millisecond)
	res = f.reconcile()
	assert.Equal(t, []string{breakertest.WhA}, f.record(), "a opens alone after one interval")
	assert.Equal(t, []string{breakertest.WhB}, f.armed(), "b, still failing, stays armed ahead")
	assert.Equal(t, time.Second, res.RequeueAfter, "looked at again in one interval")

	f.clock.Step(time.Second)
	f.fail(breakertest.WhB, 1)
	f.reconcile()
	assert.Equal(t, []string{breakertest.WhA, breakertest.WhB}, f.record(), "b opens at once: nothing left to wait for")
	assert.Equal(t, 2, f.cl.transitions)
	assert.Equal(t, 1, f.cl.arming)
}

// Closings that come together are written together, and the hold is
// bounded as for openings.
func TestConfigurationReconciler_closesSiblingsInOneWrite(t *testing.T) {
	f := newBatchFixture(t, []string{breakertest.WhA, breakertest.WhB, whC}, 3, 3, breakertest.WhA, breakertest.WhB, whC)
	f.heal(breakertest.WhA, 3)
	f.heal(breakertest.WhB, 2)
	f.heal(whC, 1)
	res := f.reconcile()
	assert.Len(t, f.record(), 3, "a waits for b; c is two successes away and is not waited for")
	assert.Equal(t, time.Second, res.RequeueAfter)
	assert.Zero(t, f.cl.transitions+f.cl.arming)

	f.clock.Step(400 * time.Millisecond)
	f.heal(breakertest.WhB, 1)
	res = f.reconcile()
	assert.Equal(t, []string{whC}, f.record(), "a and b close in one write")
	assert.Equal(t, []string{breakertest.WhA, breakertest.WhB}, f.armed(), "and stay armed circuit.DisarmAfter")
	assert.Equal(t, 1, f.cl.transitions)
	assert.Equal(t, circuit.DisarmAfter, res.RequeueAfter)

	f.clock.Step(400 * time.Millisecond)
	f.heal(whC, 1)
	res = f.reconcile()
	assert.Equal(t, []string{whC}, f.record(), "c is now one success away, but nothing else closes")
	f.heal(whC, 1)
	res = f.reconcile()
	assert.Empty(t, f.record())
	assert.Equal(t, 2, f.cl.transitions)
	assert.Equal(t, circuit.DisarmAfter, res.RequeueAfter, "disarmed circuit.DisarmAfter after the latest closing")
	f.clock.Step(circuit.DisarmAfter)
	f.reconcile()
	assert.Empty(t, f.armed())
	assert.Equal(t, 1, f.cl.arming, "all three disarmed in one write")
}

// A single failed probe arms nothing and writes nothing; nor does a
// target one failure away in a configuration handed to its
// administrators. While openings are held (every target failing at once)
// marking is armed ahead, and nothing opens. A target
// armed ahead that recovers without opening is disarmed, circuit.DisarmAfter after
// it was armed.
func TestConfigurationReconciler_aBlipArmsNothing(t *testing.T) {
	t.Run("one failure", func(t *testing.T) {
		f := newBatchFixture(t, []string{breakertest.WhA, breakertest.WhB}, 3, 2)
		f.fail(breakertest.WhA, 1)
		assert.False(t, decide.ArmsAhead(decide.Read(f.get()), f.inputs()))
		res := f.reconcile()
		assert.Zero(t, res.RequeueAfter)
		assert.Zero(t, f.cl.arming+f.cl.transitions)
	})
	t.Run("openAfter 2: one failure is the threshold's step, not ahead of it", func(t *testing.T) {
		f := newBatchFixture(t, []string{breakertest.WhA}, 2, 2)
		f.fail(breakertest.WhA, 1)
		assert.False(t, decide.ArmsAhead(decide.Read(f.get()), f.inputs()))
		f.reconcile()
		assert.Zero(t, f.cl.arming+f.cl.transitions)
	})
	t.Run("while openings are held, marking is armed ahead and nothing opens", func(t *testing.T) {
		// The hold gives way after its bound; the openings it held then
		// go at once, armed, as they would without it.
		f := newBatchFixture(t, []string{breakertest.WhA, breakertest.WhB}, 3, 2)
		f.state.HoldWhenAllFail = 2
		f.fail(breakertest.WhA, 2)
		f.fail(breakertest.WhB, 2)
		assert.True(t, f.inputs().HoldOpen)
		assert.True(t, decide.ArmsAhead(decide.Read(f.get()), f.inputs()))
		f.reconcile()
		assert.Equal(t, 1, f.cl.arming)
		assert.Zero(t, f.cl.transitions)
		assert.Equal(t, []string{breakertest.WhA, breakertest.WhB}, f.armed())
	})
	t.Run("handed off", func(t *testing.T) {
		f := newBatchFixture(t, []string{breakertest.WhA}, 3, 2)
		mwc := f.get()
		mwc.Annotations[circuit.OverrideAnnotation] = "ours now"
		require.NoError(t, f.cl.Client.Update(context.Background(), mwc))
		f.fail(breakertest.WhA, 2)
		assert.False(t, decide.ArmsAhead(decide.Read(f.get()), f.inputs()))
		f.reconcile()
		assert.Zero(t, f.cl.arming+f.cl.transitions)
	})
	t.Run("armed ahead, then recovered", func(t *testing.T) {
		f := newBatchFixture(t, []string{breakertest.WhA}, 3, 2)
		f.fail(breakertest.WhA, 2)
		f.reconcile()
		require.Equal(t, []string{breakertest.WhA}, f.armed())
		f.clock.Step(time.Second)
		f.heal(breakertest.WhA, 1)
		res := f.reconcile()
		assert.Equal(t, []string{breakertest.WhA}, f.armed(), "not yet: circuit.DisarmAfter after it was armed")
		assert.Equal(t, circuit.DisarmAfter-time.Second, res.RequeueAfter)
		f.clock.Step(circuit.DisarmAfter - time.Second)
		res = f.reconcile()
		assert.Empty(t, f.armed())
		assert.Zero(t, res.RequeueAfter)
		assert.Equal(t, 2, f.cl.arming)
		assert.Zero(t, f.cl.transitions)
	})
}

// laggingCache is a cache that has not seen the reconciler's writes yet:
// it answers reads with the object as it was when frozen.
type laggingCache struct {
	*countingClient
	frozen client.Object
}

func (c *laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if c.frozen == nil {
		return c.countingClient.Get(ctx, key, obj, opts...)
	}
	c.frozen.(*admissionregistrationv1.MutatingWebhookConfiguration).DeepCopyInto(obj.(*admissionregistrationv1.MutatingWebhookConfiguration))
	return nil
}

// A reconcile that follows the reconciler's own write before the cache
// shows it decides from the object as written, not from the cache's
// older copy: no Conflict.
func TestConfigurationReconciler_readsItsOwnWritesBeforeTheCacheDoes(t *testing.T) {
	f := newBatchFixture(t, []string{breakertest.WhA}, 2, 2)
	cache := &laggingCache{countingClient: f.cl, frozen: f.get()}
	f.r.Client = cache
	f.fail(breakertest.WhA, 2)
	f.reconcile() // arms
	require.Equal(t, []string{breakertest.WhA}, f.armed())
	f.reconcile() // opens, from the object the arming wrote
	assert.Equal(t, []string{breakertest.WhA}, f.record())
	assert.Zero(t, testutil.ToFloat64(f.r.Metrics.WriteConflicts))

	cache.frozen = nil // caught up
	f.heal(breakertest.WhA, 2)
	f.reconcile()
	assert.Empty(t, f.record())
	assert.Zero(t, testutil.ToFloat64(f.r.Metrics.WriteConflicts))
}

func openCountOf(mwc *admissionregistrationv1.MutatingWebhookConfiguration, hook string) int {
	if wh := circuit.FindWebhook(mwc, hook); wh != nil && *wh.FailurePolicy == admissionregistrationv1.Ignore {
		return 1
	}
	return 0
}
