package breaker

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakermetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

type stubProber struct{ result probe.Result }

func (p stubProber) Probe(context.Context, admissionregistrationv1.MutatingWebhook, probe.Spec) probe.Result {
	return p.result
}

// runnerFor returns a runner over one configuration read from a fake
// client (only Get matters here) and its trigger channel.
func runnerFor(t *testing.T, mwc *admissionregistrationv1.MutatingWebhookConfiguration, tgt config.Target, res probe.Result) (*ProbeRunner, chan event.GenericEvent) {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	trigger := make(chan event.GenericEvent, 100)
	tgt.Probe.Kind = config.ProbeAdmissionReview
	return &ProbeRunner{
		Reader:   fake.NewClientBuilder().WithScheme(scheme).WithObjects(mwc).Build(),
		Prober:   stubProber{res},
		Targets:  []config.Target{tgt},
		State:    NewState(),
		Metrics:  breakermetrics.NewMetrics(),
		Recorder: events.NewFakeRecorder(100),
		Triggers: map[circuit.Kind]chan<- event.GenericEvent{circuit.KindMutating: trigger},
		Clock:    clocktesting.NewFakeClock(breakertest.Now),
	}, trigger
}

// TestProbeRunner_ProbeOnce_wakesOnlyWhenPlanWouldWrite: the runner only
// observes. It wakes the reconciler exactly when Plan would change the
// configuration, so an administrator's Ignore baseline under a failing
// webhook costs no reconcile at all.
func TestProbeRunner_ProbeOnce_wakesOnlyWhenPlanWouldWrite(t *testing.T) {
	cases := map[string]struct {
		policy   *admissionregistrationv1.FailurePolicyType
		mode     config.Mode
		result   probe.Result
		wantWake []bool // after each probe
	}{
		"a failing webhook with Fail wakes it one probe before the opening threshold, to arm marking ahead": {
			policy: breakertest.PolicyFail, mode: config.ModeIgnore, result: breakertest.FailedResult(probe.ReasonTimeout),
			wantWake: []bool{false, true, true, true},
		},
		"a failing webhook on an administrator's Ignore baseline never wakes it in Ignore mode": {
			policy: breakertest.PolicyIgnore, mode: config.ModeIgnore, result: breakertest.FailedResult(probe.ReasonTimeout),
			wantWake: []bool{false, false, false, false, false, false},
		},
		"the Ignore baseline in Bypass mode still wants the marker (armed ahead)": {
			policy: breakertest.PolicyIgnore, mode: config.ModeBypass, result: breakertest.FailedResult(probe.ReasonTimeout),
			wantWake: []bool{false, true, true},
		},
		"a healthy closed webhook never wakes it": {
			policy: breakertest.PolicyFail, mode: config.ModeBypass, result: breakertest.HealthyResult(),
			wantWake: []bool{false, false, false, false, false},
		},
		"Unknown never wakes it": {
			policy: breakertest.PolicyFail, mode: config.ModeBypass, result: probe.Result{Outcome: probe.OutcomeUnknown},
			wantWake: []bool{false, false, false, false, false},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, trigger := runnerFor(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, tc.policy)), breakertest.Target(breakertest.WhA, tc.mode, 3, 2), tc.result)
			for i, want := range tc.wantWake {
				r.ProbeOnce(context.Background(), r.Targets[0])
				assert.Equal(t, want, len(trigger) == 1, "probe %d", i+1)
				for len(trigger) > 0 {
					<-trigger
				}
			}
		})
	}
}

func TestProbeRunner_ProbeOnce_openCircuitWakesAtTheClosingThreshold(t *testing.T) {
	open := breakertest.WithEntries(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), circuit.Record{breakertest.WhA: breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)})
	r, trigger := runnerFor(t, open, breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2), breakertest.HealthyResult())
	r.ProbeOnce(context.Background(), r.Targets[0])
	assert.Empty(t, trigger)
	r.ProbeOnce(context.Background(), r.Targets[0])
	assert.Len(t, trigger, 1)
}

// hangingProber's probes wait until released or their context ends.
type hangingProber struct {
	started  atomic.Int32
	recovery atomic.Int32 // probes started with Spec.Recovery
	release  chan struct{}
}

func (p *hangingProber) Probe(ctx context.Context, _ admissionregistrationv1.MutatingWebhook, spec probe.Spec) probe.Result {
	p.started.Add(1)
	if spec.Recovery {
		p.recovery.Add(1)
	}
	select {
	case <-ctx.Done():
	case <-p.release:
	}
	return breakertest.FailedResult(probe.ReasonTimeout)
}

// startHanging starts a runner of tgt on mwc whose probes hang until
// released, on a fake clock; it stops when the test ends.
func startHanging(t *testing.T, mwc *admissionregistrationv1.MutatingWebhookConfiguration, tgt config.Target) (*ProbeRunner, *hangingProber, *clocktesting.FakeClock) {
	t.Helper()
	r, _ := runnerFor(t, mwc, tgt, probe.Result{})
	p := &hangingProber{release: make(chan struct{})}
	r.Prober = p
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r, p, r.Clock.(*clocktesting.FakeClock)
}

// A probe starts every interval even while earlier ones still wait on a
// hanging webhook, up to MaxProbesInFlight: the failures of a hang then
// come one per interval, not one per timeout.
func TestProbeRunner_startsAProbeEveryIntervalWhileEarlierOnesWait(t *testing.T) {
	tgt := breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2)
	tgt.Probe.Interval = time.Second
	r, p, clock := startHanging(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), tgt)

	step := func() {
		t.Helper()
		require.Eventually(t, clock.HasWaiters, 10*time.Second, time.Millisecond)
		clock.Step(tgt.Probe.Interval)
	}
	limit := MaxProbesInFlight(tgt, false)
	require.Equal(t, 3, limit)
	for want := 1; want <= limit; want++ {
		step()
		require.Eventually(t, func() bool { return int(p.started.Load()) == want }, 10*time.Second, time.Millisecond,
			"probe %d did not start while %d wait", want, want-1)
	}
	step()
	step()
	time.Sleep(20 * time.Millisecond) // the loop has run; nothing else to wait for
	assert.Equal(t, int32(limit), p.started.Load(), "more than MaxProbesInFlight probes at once")

	p.release <- struct{}{} // one answers
	require.Eventually(t, func() bool { return r.inFlight[tgt.Key()].Load() == int32(limit-1) }, 10*time.Second, time.Millisecond)
	step()
	require.Eventually(t, func() bool { return int(p.started.Load()) == limit+1 }, 10*time.Second, time.Millisecond,
		"no probe started once one had answered")
}

// An open circuit's probes look for recovery (Spec.Recovery), one at a
// time: a second one does not start while the first waits on a hanging
// webhook.
func TestProbeRunner_anOpenCircuitIsProbedOneAtATime(t *testing.T) {
	tgt := breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2)
	tgt.Probe.Interval = time.Second
	open := breakertest.WithEntries(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), circuit.Record{breakertest.WhA: breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)})
	_, p, clock := startHanging(t, open, tgt)

	require.Equal(t, 1, MaxProbesInFlight(tgt, true))
	for range 4 {
		require.Eventually(t, clock.HasWaiters, 10*time.Second, time.Millisecond)
		clock.Step(tgt.Probe.Interval)
	}
	require.Eventually(t, func() bool { return p.recovery.Load() == 1 }, 10*time.Second, time.Millisecond, "the first probe looks for recovery")
	require.Eventually(t, clock.HasWaiters, 10*time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond) // the loop has run; nothing else to wait for
	assert.Equal(t, int32(1), p.started.Load(), "a second probe of the open circuit started while the first waits")
}

// A recovery probe the Prober did not send (its budget of new
// connections was spent) counts for nothing, not even as Unknown.
func TestProbeRunner_ProbeOnce_aProbeNotSentCountsNothing(t *testing.T) {
	open := breakertest.WithEntries(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), circuit.Record{breakertest.WhA: breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)})
	tgt := breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2)
	r, trigger := runnerFor(t, open, tgt, probe.Result{Outcome: probe.OutcomeUnknown, Err: probe.ErrRecoveryDialBudget})
	r.State.Register(tgt.Key())
	for range 3 {
		r.ProbeOnce(context.Background(), r.Targets[0])
	}
	st, ok := r.State.Get(tgt.Key())
	require.True(t, ok)
	assert.Zero(t, st.Unknowns, "counted as Unknown")
	assert.Zero(t, testutil.ToFloat64(r.Metrics.ProbeUnknown.WithLabelValues(string(tgt.Kind), tgt.Configuration, tgt.Webhook)))
	assert.Equal(t, 3.0, testutil.ToFloat64(r.Metrics.RecoveryProbesNotSent))
	assert.Empty(t, trigger)
}

// The runner decodes a configuration's record again only when its text
// changed, and always judges the view it was given.
func TestProbeRunner_snapshotDecodesOnlyChangedText(t *testing.T) {
	r := &ProbeRunner{}
	closed := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail))
	first := r.snapshot(circuit.KindMutating, closed)
	assert.Empty(t, first.Record)

	open := breakertest.WithEntries(t, closed.DeepCopy(), circuit.Record{breakertest.WhA: breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)})
	changed := r.snapshot(circuit.KindMutating, open)
	assert.Equal(t, []string{breakertest.WhA}, changed.Record.Webhooks(), "the record's text changed: decoded again")

	same := open.DeepCopy()
	again := r.snapshot(circuit.KindMutating, same)
	assert.Same(t, same, again.View, "the view given, not the one decoded")
	assert.Equal(t, reflect.ValueOf(changed.Record).Pointer(), reflect.ValueOf(again.Record).Pointer(), "the same text: not decoded again")
}

func TestFirstSpread(t *testing.T) {
	assert.Equal(t, time.Second, FirstSpread(time.Second, 1), "a few targets spread over one interval")
	assert.Equal(t, time.Second, FirstSpread(time.Second, FirstProbesPerSecond), "as many as the budget: one interval")
	assert.Equal(t, 10*time.Second, FirstSpread(time.Second, 1000), "a thousand targets: at most FirstProbesPerSecond first probes a second")
	assert.Equal(t, 30*time.Second, FirstSpread(30*time.Second, 1000), "never shorter than the interval")
}

// sequenceProber answers each probe with the next of its results and
// records whether each probe looked for recovery (Spec.Recovery).
type sequenceProber struct {
	mu       sync.Mutex
	results  []probe.Result
	recovery []bool
}

func (p *sequenceProber) Probe(_ context.Context, _ admissionregistrationv1.MutatingWebhook, spec probe.Spec) probe.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.recovery = append(p.recovery, spec.Recovery)
	res := p.results[0]
	if len(p.results) > 1 {
		p.results = p.results[1:]
	}
	return res
}

// The probe after an Unknown of a closed circuit looks for the guard's own
// recovery, within the budget of new connections, unless the target has
// a failure counted: a hanging webhook whose timeouts a throttled guard sometimes
// cannot count is on its way to opening, and the budget must not stall
// that. Its probes go unbudgeted until it opens.
func TestProbeRunner_ProbeOnce_aProbeAfterAnUnknownIsARecoveryProbe(t *testing.T) {
	closed := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail))
	stalled := probe.Result{Outcome: probe.OutcomeUnknown, Err: errors.New("timed out while webhook-guard itself did not run")}
	for name, tc := range map[string]struct {
		results []probe.Result
		want    []bool // Spec.Recovery of each probe
	}{
		"a failure, then Unknowns: never budgeted": {
			results: []probe.Result{breakertest.FailedResult(probe.ReasonTimeout), stalled, stalled, breakertest.FailedResult(probe.ReasonTimeout)},
			want:    []bool{false, false, false, false},
		},
		"Unknowns with no failure counted: budgeted after the first": {
			results: []probe.Result{stalled, stalled, {Outcome: probe.OutcomeHealthy}, {Outcome: probe.OutcomeHealthy}},
			want:    []bool{false, true, true, false},
		},
		"a success ends the failures: budgeted again after an Unknown": {
			results: []probe.Result{breakertest.FailedResult(probe.ReasonTimeout), {Outcome: probe.OutcomeHealthy}, stalled, stalled},
			want:    []bool{false, false, false, true},
		},
	} {
		t.Run(name, func(t *testing.T) {
			tgt := breakertest.Target(breakertest.WhA, config.ModeIgnore, 3, 2)
			r, _ := runnerFor(t, closed, tgt, probe.Result{})
			p := &sequenceProber{results: tc.results}
			r.Prober = p
			r.State.Register(tgt.Key())
			for range tc.want {
				r.ProbeOnce(context.Background(), r.Targets[0])
			}
			assert.Equal(t, tc.want, p.recovery)
		})
	}
}
