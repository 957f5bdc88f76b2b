package breaker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/apimetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

func TestPathProbeNeeded(t *testing.T) {
	cases := map[string]struct {
		open  bool
		entry circuit.Entry
		api   decide.Counts
		want  bool
	}{
		"a closed circuit whose apiserver calls are fine costs nothing":    {api: breakertest.Healthy(3), want: false},
		"a closed circuit whose apiserver calls fail is probed":            {api: breakertest.APIServerFailing(1), want: true},
		"an open circuit the apiserver opened is probed, calls or not":     {open: true, entry: circuit.Entry{Signal: decide.SignalAPIServer}, want: true},
		"an open circuit both opened is probed":                            {open: true, entry: circuit.Entry{Signal: decide.SignalBoth}, want: true},
		"an open circuit the road opened is probed":                        {open: true, entry: circuit.Entry{Signal: decide.SignalRoad}, want: true},
		"an open circuit the probe opened is probed only while calls fail": {open: true, entry: circuit.Entry{Signal: decide.SignalProbe}, api: breakertest.Healthy(1), want: false},
		"an open circuit the probe opened, calls failing (Ignore)":         {open: true, entry: circuit.Entry{Signal: decide.SignalProbe}, api: breakertest.APIServerFailing(1), want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, decide.PathProbeNeeded(tc.open, tc.entry, tc.api))
		})
	}
}

func TestPlan_apiserverSignalOpensAndSaysWhy(t *testing.T) {
	cur := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail))
	tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
	in := decide.Inputs{
		Targets: []config.Target{tgt}, Now: breakertest.Now, Signer: "breaker",
		Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(7), APIServer: breakertest.APIServerFailing(3), Path: breakertest.PathFailing(3)}},
	}
	next, changes, err := decide.Plan(cur, in)
	require.NoError(t, err)
	require.Len(t, changes, 1)
	assert.Equal(t, decide.Opened, changes[0].Kind)
	assert.Equal(t, decide.SignalAPIServer, changes[0].Signal)
	assert.Equal(t, "opened the circuit on "+breakertest.WhA+" in Bypass mode after 3 consecutive failing intervals of the apiserver's own calls "+
		"(last: apiserver: 37 of 40 calls failed (calling_webhook_error or fail-open) in the last 1s) while the direct probe was healthy: "+
		"the apiserver's path to the webhook is broken (konnectivity, a firewall or a NetworkPolicy between the control plane and the webhook); "+
		"confirmed by 3 failed probes in a row through kube-apiserver's service proxy, which dials through the same egress as its webhook calls "+
		"(last: timeout: no answer from kube-apiserver's service proxy within 1s); original failurePolicy Fail",
		changes[0].Message)
	entry := breakertest.MustRecord(t, next)[breakertest.WhA]
	assert.Equal(t, decide.SignalAPIServer, entry.Signal)
	assert.Equal(t, string(decide.ReasonAPIServerCalls), entry.Reason)
	assert.Equal(t, breakertest.PolicyFail, entry.OriginalFailurePolicy)
	assert.True(t, isBypassed(next, breakertest.WhA))

	// with is in with WhA's evidence changed by change, in a map of its own.
	with := func(in decide.Inputs, change func(*decide.Evidence)) decide.Inputs {
		ev := in.Evidence[breakertest.WhA]
		change(&ev)
		in.Evidence = map[string]decide.Evidence{breakertest.WhA: ev}
		return in
	}
	t.Run("a tenant's failing calls, the road healthy, open nothing", func(t *testing.T) {
		in := with(in, func(ev *decide.Evidence) {
			ev.APIServer, ev.Path = breakertest.APIServerFailing(60), breakertest.PathHealthy(60)
		})
		_, changes, err := decide.Plan(cur, in)
		require.NoError(t, err)
		assert.Empty(t, changes)
	})
	t.Run("an outage both signals see is one change, named both", func(t *testing.T) {
		in := with(in, func(ev *decide.Evidence) { ev.Probe = breakertest.Failing(3, probe.ReasonTimeout) })
		_, changes, err := decide.Plan(cur, in)
		require.NoError(t, err)
		require.Len(t, changes, 1)
		assert.Equal(t, decide.SignalBoth, changes[0].Signal)
	})
	t.Run("the hold stops probe openings but not the apiserver's", func(t *testing.T) {
		in := with(in, func(ev *decide.Evidence) {
			ev.Probe, ev.APIServer = breakertest.Failing(3, probe.ReasonTimeout), breakertest.Healthy(3)
		})
		in.HoldOpen = true
		_, changes, err := decide.Plan(cur, in)
		require.NoError(t, err)
		assert.Empty(t, changes, "every probe failing at once, the apiserver's calls fine: the guard's network")
		in = with(in, func(ev *decide.Evidence) {
			ev.APIServer, ev.Path = breakertest.APIServerFailing(3), breakertest.PathHealthy(3)
		})
		_, changes, err = decide.Plan(cur, in)
		require.NoError(t, err)
		assert.Empty(t, changes, "the apiserver's calls fail, but the road and the webhook's server answer: a tenant's requests")
		in = with(in, func(ev *decide.Evidence) { ev.Path = breakertest.PathFailing(3) })
		_, changes, err = decide.Plan(cur, in)
		require.NoError(t, err)
		require.Len(t, changes, 1, "the apiserver and the path probe agree the webhook is unreachable")
	})
}

func isBypassed(mwc *admissionregistrationv1.MutatingWebhookConfiguration, name string) bool {
	wh := circuit.FindWebhook(mwc, name)
	return wh != nil && circuit.BypassIndex(wh) >= 0 && *wh.FailurePolicy == admissionregistrationv1.Ignore
}

func TestPlan_closingEventCountsWhatWasAdmittedWithoutTheWebhook(t *testing.T) {
	entry := breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)
	entry.OpenedAt.Time = breakertest.Now.Add(-13 * time.Minute).Truncate(time.Second)
	cur := breakertest.WithEntries(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), circuit.Record{breakertest.WhA: entry})
	in := decide.Inputs{
		Targets: []config.Target{breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))}, Now: breakertest.Now,
		Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(2), Admitted: 1234}},
	}
	_, changes, err := decide.Plan(cur, in)
	require.NoError(t, err)
	require.Len(t, changes, 1)
	assert.True(t, strings.HasSuffix(changes[0].Message, "; the apiserver admitted 1234 requests without the mutation while open (13m1s), as counted from its /metrics"), changes[0].Message)
}

// fakeScraper returns its samples in turn, then its error.
type fakeScraper struct {
	samples []apimetrics.Sample
	err     error
}

func (f *fakeScraper) Scrape(context.Context, map[apimetrics.Webhook]bool) (apimetrics.Sample, error) {
	if f.err != nil {
		return apimetrics.Sample{}, f.err
	}
	s := f.samples[0]
	if len(f.samples) > 1 {
		f.samples = f.samples[1:]
	}
	return s, nil
}

func sample(calls, errs float64) apimetrics.Sample {
	return apimetrics.Sample{Instance: 1, Bytes: 1000, Webhooks: map[apimetrics.Webhook]apimetrics.Counters{
		{Name: breakertest.WhA, Type: apimetrics.Mutating, MarkingPolicy: marking.Name(breakertest.ConfigName, breakertest.WhA)}: {Calls: calls, CallErrors: errs, Series: 2},
	}}
}

func drainEvents(r *ProbeRunner) []string {
	var out []string
	ch := r.Recorder.(*events.FakeRecorder).Events
	for len(ch) > 0 {
		out = append(out, <-ch)
	}
	return out
}

// stubPathProber answers every path probe with result, and counts them.
type stubPathProber struct {
	result probe.Result
	calls  int
	got    string
}

func (p *stubPathProber) Probe(_ context.Context, svc admissionregistrationv1.ServiceReference, path string, _ time.Duration) probe.Result {
	p.calls++
	p.got = probe.ProxyName(svc) + path
	return p.result
}

// The apiserver's calls fail while the direct probe is healthy. The path
// probe runs only once they fail, through the webhook's own Service and
// path. If it fails too (the road is broken), the circuit opens once
// both have openAfter failures; if it succeeds (a tenant's requests fail,
// or another webhook's of the same name), nothing ever wakes the
// reconciler, and the disagreement names the cause.
func TestProbeRunner_pathProbeDecidesWhetherTheApiserverSignalOpens(t *testing.T) {
	for name, tc := range map[string]struct {
		path     probe.Result
		wakes    bool
		explains string
	}{
		"the road is broken": {path: probe.Result{Outcome: probe.OutcomeFailed, Reason: probe.ReasonTimeout, Err: errors.New("no answer")}, wakes: true,
			explains: "fails too (timeout: no answer): the apiserver's path to the webhook is broken"},
		"the road works": {path: probe.Result{Outcome: probe.OutcomeHealthy}, wakes: false,
			explains: "reaches the webhook's server, so the road works: the failing calls fail because of what they carry"},
		"the road cannot be probed": {path: probe.Result{Outcome: probe.OutcomeUnknown, Err: errors.New("forbidden")}, wakes: false,
			explains: "cannot tell whether the road works (forbidden), so nothing opens"},
	} {
		t.Run(name, func(t *testing.T) {
			tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
			r, trigger := runnerFor(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), tgt, breakertest.HealthyResult())
			clock := r.Clock.(*clocktesting.FakeClock)
			scraper := &fakeScraper{}
			for i := range 5 {
				scraper.samples = append(scraper.samples, sample(float64(40*i), float64(37*i)))
			}
			r.Scraper = scraper
			paths := &stubPathProber{result: tc.path}
			r.PathProber = paths
			s := newAPIServerSignal(r.Targets, 0)
			require.NotNil(t, s)
			ctx := context.Background()
			r.ProbeOnce(ctx, r.Targets[0]) // the direct probe is healthy
			assert.Zero(t, paths.calls, "no path probe while the apiserver's calls are fine")
			var woke []bool
			took := func() {
				woke = append(woke, len(trigger) > 0)
				for len(trigger) > 0 {
					<-trigger
				}
			}
			for range 4 {
				clock.Step(time.Second)
				r.ScrapeOnce(ctx, s)
				took()
				r.ProbeOnce(ctx, r.Targets[0])
				took()
			}
			want := []bool{false, false, false, false, false, false, false, tc.wakes}
			assert.Equal(t, want, woke, "the first scrape is a baseline; three failing intervals and three path probes follow")
			assert.Equal(t, 3, paths.calls)
			assert.Equal(t, "https:svc:8443/mutate", paths.got, "the webhook's own Service, port and path")
			st, _ := r.State.Get(tgt.Key())
			assert.Equal(t, 3, st.APIServer.Failures)
			assert.Equal(t, decide.SignalAPIServer, st.Disagree)
			evs := drainEvents(r)
			var disagree []string
			for _, e := range evs {
				if strings.Contains(e, "SignalsDisagree") {
					disagree = append(disagree, e)
				}
			}
			require.Len(t, disagree, 1, "%v", evs)
			assert.Contains(t, disagree[0], "the direct probe is healthy but the apiserver's own calls fail")
			assert.Contains(t, disagree[0], tc.explains)
		})
	}
}

func TestProbeRunner_ScrapeOnce_missingRBACIsUnknownReportedOnce(t *testing.T) {
	tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
	r, trigger := runnerFor(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), tgt, breakertest.HealthyResult())
	r.Scraper = &fakeScraper{err: fmt.Errorf("reading the apiserver's /metrics: %w", apierrors.NewForbidden(schema.GroupResource{}, "", errors.New("no")))}
	s := newAPIServerSignal(r.Targets, 0)
	for range 10 {
		r.ScrapeOnce(context.Background(), s)
	}
	assert.Empty(t, trigger, "nothing opens from a scrape that cannot run")
	st, _ := r.State.Get(tgt.Key())
	assert.Zero(t, st.APIServer.Failures)
	require.NotNil(t, st.APIServer.LastUnknown)
	evs := drainEvents(r)
	require.Len(t, evs, 1, "one Event, not one per interval")
	assert.Contains(t, evs[0], "APIServerSignalUnknown")
	assert.Contains(t, evs[0], "get on the non-resource URL /metrics")
}

func TestNewAPIServerSignal_oneScrapeAtTheConfiguredIntervalNotBelowTheFloor(t *testing.T) {
	a := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
	a.Probe.Interval = 2 * time.Second
	b := breakertest.WithSignal(breakertest.Target(breakertest.WhB, config.ModeBypass, 3, 2))
	b.Probe.Interval = 500 * time.Millisecond
	c := breakertest.Target(breakertest.WhOther, config.ModeBypass, 3, 2)
	c.Probe.Interval = 100 * time.Millisecond
	s := newAPIServerSignal([]config.Target{a, b, c}, 30*time.Second)
	assert.Equal(t, 30*time.Second, s.interval, "the configured interval, whatever the probes")
	assert.Len(t, s.want, 2)
	assert.Equal(t, MinScrapeInterval, newAPIServerSignal([]config.Target{a, b, c}, 100*time.Millisecond).interval, "never more often than MinScrapeInterval")
	assert.Nil(t, newAPIServerSignal([]config.Target{c}, time.Second), "no target enables it: no scrape at all")
}

// A circuit the apiserver signal opened on a url road (withoutPathProbe:
// Open), which no path probe can close, waits out MinOpen in Bypass mode.
func TestPlan_bypassOpenedByTheApiserverOnAURLRoadStaysOpenAtLeastMinOpen(t *testing.T) {
	entry := breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)
	entry.Signal = decide.SignalAPIServer
	entry.OpenedAt.Time = breakertest.Now.Add(-20 * time.Second).Truncate(time.Second)
	for name, tc := range map[string]struct {
		mode    config.Mode
		signal  string
		minOpen time.Duration
		closes  bool
	}{
		"not before MinOpen":                              {mode: config.ModeBypass, signal: decide.SignalAPIServer, minOpen: 30 * time.Second, closes: false},
		"after MinOpen, as a trial":                       {mode: config.ModeBypass, signal: decide.SignalAPIServer, minOpen: 10 * time.Second, closes: true},
		"opened by both: the same":                        {mode: config.ModeBypass, signal: decide.SignalBoth, minOpen: 30 * time.Second, closes: false},
		"opened by the probe: closeAfter alone":           {mode: config.ModeBypass, signal: decide.SignalProbe, minOpen: 30 * time.Second, closes: true},
		"Ignore mode sees the apiserver's calls: no wait": {mode: config.ModeIgnore, signal: decide.SignalAPIServer, minOpen: 30 * time.Second, closes: true},
	} {
		t.Run(name, func(t *testing.T) {
			e := entry
			e.Mode, e.Signal = tc.mode, tc.signal
			cur := breakertest.WithEntries(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), circuit.Record{breakertest.WhA: e})
			tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, tc.mode, 3, 2))
			tgt.APIServerSignal.WithoutPathProbe = config.WithoutPathProbeOpen
			in := decide.Inputs{
				Targets: []config.Target{tgt}, Now: breakertest.Now,
				Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(5), MinOpen: tc.minOpen, Path: decide.Path{Road: decide.RoadURL}}},
			}
			_, changes, err := decide.Plan(cur, in)
			require.NoError(t, err)
			assert.Equal(t, tc.closes, len(changes) == 1)
		})
	}
}

func TestState_minOpenDoublesPerReopeningUntilTheApiserverIsHealthy(t *testing.T) {
	s := NewState()
	tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
	tgt.APIServerSignal.MinOpen = time.Second
	minOpenNow := func() time.Duration {
		return s.Inputs([]config.Target{tgt}, breakertest.Now, "", "1").Evidence[breakertest.WhA].MinOpen
	}
	s.Observe(tgt.Key(), breakertest.HealthyResult(), breakertest.Now)
	assert.Equal(t, time.Second, minOpenNow())
	s.NoteOpening(tgt, decide.SignalProbe, breakertest.Now)
	assert.Equal(t, time.Second, minOpenNow(), "probe openings do not count")
	var got []time.Duration
	for range 8 {
		s.NoteOpening(tgt, decide.SignalAPIServer, breakertest.Now)
		got = append(got, minOpenNow())
	}
	assert.Equal(t, []time.Duration{1, 2, 4, 8, 16, 32, 32, 32}, func() []time.Duration {
		out := make([]time.Duration, len(got))
		for i, d := range got {
			out[i] = d / time.Second
		}
		return out
	}())
	s.ObserveAPIServer(tgt.Key(), breakertest.HealthyResult(), time.Time{}, 0, 0, false)
	assert.Equal(t, time.Second, minOpenNow(), "a healthy apiserver observation ends the backoff")
}

// An Ignore circuit whose probe can no longer run closes on the
// apiserver's successful calls, and the Event says so.
func TestPlan_closesAnUnknownProbesCircuitOnTheApiserversWord(t *testing.T) {
	cur := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail))
	tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeIgnore, 3, 2))
	in := decide.Inputs{
		Targets: []config.Target{tgt}, Now: breakertest.Now, Signer: "breaker",
		Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(3, probe.ReasonTimeout), APIServer: breakertest.Healthy(1)}},
	}
	open, changes, err := decide.Plan(cur, in)
	require.NoError(t, err)
	require.Len(t, changes, 1)
	c := breakertest.Failing(3, probe.ReasonTimeout)
	for range 2 {
		c.Observe(probe.Result{Outcome: probe.OutcomeUnknown, Err: errors.New("no resource kube-apiserver serves matches")})
	}
	in.Evidence[breakertest.WhA] = decide.Evidence{Probe: c, APIServer: breakertest.Healthy(2)}
	closed, changes, err := decide.Plan(open, in)
	require.NoError(t, err)
	require.Len(t, changes, 1)
	assert.Equal(t, decide.Closed, changes[0].Kind)
	assert.Contains(t, changes[0].Message, "after 2 intervals in which the probe could not run (last: no resource kube-apiserver serves matches) while the apiserver's own calls to the webhook succeeded for 2 intervals")
	assert.Equal(t, breakertest.PolicyFail, circuit.FindWebhook(closed, breakertest.WhA).FailurePolicy)
}

// A circuit the road opened closes on the path probe, with no minimum to
// wait out and no trial: the Event says what closed it, and nothing about
// opening again.
func TestPlan_aCircuitTheRoadOpenedClosesOnThePathProbeWithoutMinOpen(t *testing.T) {
	s := NewState()
	tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
	tgt.APIServerSignal.MinOpen = time.Hour
	s.Observe(tgt.Key(), breakertest.HealthyResult(), breakertest.Now)
	s.Observe(tgt.Key(), breakertest.HealthyResult(), breakertest.Now)
	s.NoteOpening(tgt, decide.SignalAPIServer, breakertest.Now)
	s.ObservePath(tgt.Key(), decide.RoadService, "", breakertest.HealthyResult())
	s.ObservePath(tgt.Key(), decide.RoadService, "", breakertest.HealthyResult())

	e := breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)
	e.Signal = decide.SignalAPIServer
	e.OpenedAt.Time = breakertest.Now.Add(-3 * time.Second).Truncate(time.Second)
	cur := breakertest.WithEntries(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), circuit.Record{breakertest.WhA: e})
	in := s.Inputs([]config.Target{tgt}, breakertest.Now, "", cur.ResourceVersion)
	assert.Zero(t, in.Evidence[breakertest.WhA].MinOpen, "no minimum on a road the path probe travels")
	next, changes, err := decide.Plan(cur, in)
	require.NoError(t, err)
	require.Len(t, changes, 1)
	assert.Equal(t, decide.Closed, changes[0].Kind)
	assert.Contains(t, changes[0].Message, "after 2 consecutive healthy probes through kube-apiserver's service proxy: its road to the webhook works again")
	assert.NotContains(t, changes[0].Message, "opens again", "not a trial")
	assert.Equal(t, breakertest.PolicyFail, circuit.FindWebhook(next, breakertest.WhA).FailurePolicy)

	t.Run("one failed path probe keeps it open, however healthy the direct probe", func(t *testing.T) {
		s.ObservePath(tgt.Key(), decide.RoadService, "", probe.Result{Outcome: probe.OutcomeFailed, Reason: probe.ReasonTimeout, Err: errors.New("no answer")})
		for range 10 {
			s.Observe(tgt.Key(), breakertest.HealthyResult(), breakertest.Now)
		}
		_, changes, err := decide.Plan(cur, s.Inputs([]config.Target{tgt}, breakertest.Now, "", cur.ResourceVersion))
		require.NoError(t, err)
		assert.Empty(t, changes)
	})
}

// The path probe's counts are kept only while it is needed: when the
// apiserver's calls recover, stale failures cannot confirm a later run.
func TestState_SetRoadForgetsThePathProbesCountsWhenNotNeeded(t *testing.T) {
	s := NewState()
	key := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2)).Key()
	for range 3 {
		s.ObservePath(key, decide.RoadService, "", probe.Result{Outcome: probe.OutcomeFailed, Reason: probe.ReasonTimeout})
	}
	s.SetRoad(key, decide.RoadService, "", true)
	st, _ := s.Get(key)
	assert.Equal(t, 3, st.Path.Failures, "still needed: kept")
	s.SetRoad(key, decide.RoadService, "", false)
	st, _ = s.Get(key)
	assert.Zero(t, st.Path.Failures)
	assert.Equal(t, probe.OutcomeFailed, st.Path.Last.Outcome, "the last result stays, for status")
	assert.Equal(t, decide.RoadService, st.Path.Road)
}

// A webhook slower than the probe's timeout but within its timeoutSeconds
// fails every probe while kube-apiserver uses its answers. While the
// apiserver signal sees its calls made and none failed, in windows that
// began after the first slow probe was sent, nothing wakes the
// reconciler: no marking is armed ahead and nothing opens, and the
// disagreement Event says why. A window with no calls, or with one failed
// call, lifts the veto, and the next slow probe wakes it to open.
func TestProbeRunner_slowProbesOpenNothingWhileTheApiserversCallsSucceed(t *testing.T) {
	slow := breakertest.FailedResult(probe.ReasonTimeout)
	slow.Slow, slow.Duration = true, 4*time.Second
	for name, next := range map[string]apimetrics.Sample{
		"a window without calls lifts the veto": sample(30, 0),
		"a window with a failed call lifts it":  sample(50, 1),
	} {
		t.Run(name, func(t *testing.T) {
			tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
			r, trigger := runnerFor(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), tgt, slow)
			clock := r.Clock.(*clocktesting.FakeClock)
			r.Scraper = &fakeScraper{samples: []apimetrics.Sample{sample(0, 0), sample(10, 0), sample(20, 0), sample(30, 0), next}}
			s := newAPIServerSignal(r.Targets, 0)
			require.NotNil(t, s)
			ctx := context.Background()
			woke := func() bool {
				w := len(trigger) > 0
				for len(trigger) > 0 {
					<-trigger
				}
				return w
			}

			r.ProbeOnce(ctx, r.Targets[0]) // sent 4 s ago, as the scrapes' baseline is read
			r.ScrapeOnce(ctx, s)
			for i := range DisagreeAfter {
				clock.Step(time.Second)
				r.ScrapeOnce(ctx, s) // 10 calls since the last read, none failed
				r.ProbeOnce(ctx, r.Targets[0])
				assert.False(t, woke(), "slow probe %d woke the reconciler while the apiserver's calls succeed", i+2)
			}
			st, _ := r.State.Get(tgt.Key())
			assert.Equal(t, DisagreeAfter+1, st.Failures)
			assert.True(t, st.Slow)
			evs := drainEvents(r)
			require.Len(t, evs, 1, "%v", evs)
			assert.Contains(t, evs[0], "SignalsDisagree")
			assert.Contains(t, evs[0], "the webhook answers within its timeoutSeconds, later than the probe waits")
			assert.Contains(t, evs[0], "no circuit opens on these probes while the calls keep succeeding")

			clock.Step(time.Second)
			r.ScrapeOnce(ctx, s)
			r.ProbeOnce(ctx, r.Targets[0])
			assert.True(t, woke(), "the next slow probe did not wake the reconciler to open")
		})
	}
}

// Metrics without process_start_time_seconds cannot tell one apiserver
// from another: the signal is Unknown, reported once, and opens nothing.
func TestProbeRunner_ScrapeOnce_withoutAProcessStartTimeIsUnknownReportedOnce(t *testing.T) {
	tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
	r, trigger := runnerFor(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), tgt, breakertest.HealthyResult())
	scraper := &fakeScraper{}
	for i := range 10 {
		s := sample(float64(40*i), float64(37*i))
		s.Instance = 0
		scraper.samples = append(scraper.samples, s)
	}
	r.Scraper = scraper
	s := newAPIServerSignal(r.Targets, 0)
	for range 10 {
		r.ScrapeOnce(context.Background(), s)
	}
	assert.Empty(t, trigger)
	st, _ := r.State.Get(tgt.Key())
	assert.Zero(t, st.APIServer.Failures)
	require.NotNil(t, st.APIServer.LastUnknown)
	assert.Contains(t, st.APIServer.LastUnknown.Err.Error(), "process_start_time_seconds")
	evs := drainEvents(r)
	require.Len(t, evs, 1, "one Event, not one per interval")
	assert.Contains(t, evs[0], "APIServerSignalUnknown")
	assert.Contains(t, evs[0], "no process_start_time_seconds")
}

// A url webhook has no road a path probe travels: none is sent, and the
// road is recorded as url. Another configuration with a webhook of the
// same name is found and named, since kube-apiserver counts both as one.
func TestProbeRunner_aURLWebhookGetsNoPathProbeAndASharedNameIsFound(t *testing.T) {
	tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
	wh := breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)
	wh.ClientConfig.Service, wh.ClientConfig.URL = nil, ptr.To("https://203.0.113.7/mutate")
	r, _ := runnerFor(t, breakertest.Config(wh), tgt, breakertest.HealthyResult())
	other := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyIgnore))
	other.Name, other.UID, other.ResourceVersion = "istio-revision-canary", breakertest.OtherUID, ""
	require.NoError(t, r.Reader.(client.Client).Create(context.Background(), other))
	paths := &stubPathProber{result: breakertest.HealthyResult()}
	r.PathProber = paths
	r.State.ObserveAPIServer(tgt.Key(), probe.Result{Outcome: probe.OutcomeFailed, Reason: decide.ReasonAPIServerCalls, Err: errors.New("failing")}, time.Time{}, 0, 0, false)
	r.ProbeOnce(context.Background(), tgt)
	assert.Zero(t, paths.calls)
	st, _ := r.State.Get(tgt.Key())
	assert.Equal(t, decide.RoadURL, st.Path.Road)
	assert.Equal(t, "istio-revision-canary", st.Path.SharedWith)
	assert.Contains(t, decide.PathSays(tgt, st.Path), "no probe travels a url webhook's road, so nothing opens on them (withoutPathProbe: Report)")
	assert.Contains(t, decide.PathSays(tgt, st.Path), "MutatingWebhookConfiguration istio-revision-canary")
}

// Just before a circuit closes, the runner reads the apiserver's counters
// once more, so that the closing Event counts what was admitted without
// the webhook up to the close, even when the circuit was open for less
// than a scrape interval. At most once per MinScrapeInterval.
func TestProbeRunner_aClosingReadsTheAdmittedCountOnceMore(t *testing.T) {
	tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
	e := breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)
	e.Signal = decide.SignalProbe
	cur := breakertest.WithEntries(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), circuit.Record{breakertest.WhA: e})
	r, trigger := runnerFor(t, cur, tgt, breakertest.HealthyResult())
	excluded := func(n float64) apimetrics.Sample {
		return apimetrics.Sample{Instance: 1, Webhooks: map[apimetrics.Webhook]apimetrics.Counters{
			{Name: breakertest.WhA, Type: apimetrics.Mutating, MarkingPolicy: marking.Name(breakertest.ConfigName, breakertest.WhA)}: {Calls: 0, Excluded: n, Series: 1},
		}}
	}
	scraper := &fakeScraper{samples: []apimetrics.Sample{excluded(100), excluded(112)}}
	r.Scraper = scraper
	r.signal = newAPIServerSignal(r.Targets, 0)
	ctx := context.Background()
	r.ScrapeOnce(ctx, r.signal) // the last regular scrape: the mark
	r.ProbeOnce(ctx, tgt)
	assert.Empty(t, trigger, "one healthy probe closes nothing")
	st, _ := r.State.Get(tgt.Key())
	assert.Zero(t, st.Admitted)
	r.ProbeOnce(ctx, tgt)
	require.Len(t, trigger, 1, "closeAfter healthy probes: the reconciler is woken")
	st, _ = r.State.Get(tgt.Key())
	assert.Equal(t, float64(12), st.Admitted, "the 12 requests bypassed since the last scrape are counted before the close")
	_, changes, err := decide.Plan(cur, r.inputs(tgt.Kind, cur))
	require.NoError(t, err)
	require.Len(t, changes, 1)
	assert.Contains(t, changes[0].Message, "the apiserver admitted 12 requests without the mutation")

	scraper.samples = []apimetrics.Sample{excluded(150)}
	<-trigger
	r.ProbeOnce(ctx, tgt)
	st, _ = r.State.Get(tgt.Key())
	assert.Equal(t, float64(12), st.Admitted, "not again within MinScrapeInterval")
}

// slowScraper takes took on clock for every read, and reports when each
// read started.
type slowScraper struct {
	clock  *clocktesting.FakeClock
	took   time.Duration
	starts chan time.Time
}

func (f *slowScraper) Scrape(context.Context, map[apimetrics.Webhook]bool) (apimetrics.Sample, error) {
	f.starts <- f.clock.Now()
	f.clock.Step(f.took)
	return sample(0, 0), nil
}

// A slow read of /metrics does not stretch the scrape interval: reads
// start every interval, so that the traffic that stands in for a probe
// stays fresh between two of them (trafficFresh is 1.5 intervals; a read
// of 0.6 interval followed by a full one would leave a gap of 1.6).
func TestProbeRunner_scrapesStartEveryIntervalHoweverLongAReadTakes(t *testing.T) {
	tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
	r, _ := runnerFor(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), tgt, breakertest.HealthyResult())
	clock := r.Clock.(*clocktesting.FakeClock)
	const interval = time.Second
	scraper := &slowScraper{clock: clock, took: 600 * time.Millisecond, starts: make(chan time.Time, 1)}
	r.Scraper = scraper
	s := newAPIServerSignal(r.Targets, interval)
	require.NotNil(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.signalLoop(ctx, s) }()
	defer func() { cancel(); <-done }()

	prev := <-scraper.starts
	for range 3 {
		require.Eventually(t, clock.HasWaiters, 5*time.Second, time.Millisecond)
		clock.Step(interval - scraper.took)
		next := <-scraper.starts
		assert.Equal(t, interval, next.Sub(prev), "the next read starts an interval after the last one started")
		prev = next
	}
}

// TestNameIndex_onePlaceAnswersBothQuestions: whether traffic may stand in
// for a target's probe (its configuration alone holds the name) and which
// configuration shares its metrics name come from one index, per kind.
func TestNameIndex_onePlaceAnswersBothQuestions(t *testing.T) {
	idx := nameIndex{
		{circuit.KindMutating, "sidecar.istio.io"}:     {"istio-revision-canary", "istio-sidecar-injector"},
		{circuit.KindMutating, "a.example.com"}:        {"pod-defaults"},
		{circuit.KindValidating, "sidecar.istio.io"}:   {"pod-defaults"},
		{circuit.KindValidating, "only.validating.io"}: {"pod-defaults"},
	}
	injector := config.Target{Kind: circuit.KindMutating, Configuration: "istio-sidecar-injector", Webhook: "sidecar.istio.io"}
	assert.Equal(t, "istio-revision-canary", idx.sharedWith(injector))
	assert.False(t, idx.alone(injector))
	mine := config.Target{Kind: circuit.KindMutating, Configuration: "pod-defaults", Webhook: "a.example.com"}
	assert.Empty(t, idx.sharedWith(mine))
	assert.True(t, idx.alone(mine))
	validating := config.Target{Kind: circuit.KindValidating, Configuration: "pod-defaults", Webhook: "sidecar.istio.io"}
	assert.Empty(t, idx.sharedWith(validating), "a mutating webhook of the same name is counted apart")
	assert.True(t, idx.alone(validating))
	assert.False(t, nameIndex{}.alone(mine), "a failed list: no traffic stands in")
}

// blockingScraper answers only once released: a read of /metrics that the
// outage slows down.
type blockingScraper struct{ release chan struct{} }

func (f *blockingScraper) Scrape(ctx context.Context, _ map[apimetrics.Webhook]bool) (apimetrics.Sample, error) {
	select {
	case <-f.release:
	case <-ctx.Done():
	}
	return sample(0, 0), nil
}

// An opening never waits for the read of /metrics that a closing in the
// same configuration makes first: the probe that brings one target to its
// threshold while another would close wakes the reconciler at once.
func TestProbeRunner_anOpeningDoesNotWaitForAClosingsRead(t *testing.T) {
	closing := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
	opening := breakertest.WithSignal(breakertest.Target(breakertest.WhB, config.ModeBypass, 3, 2))
	e := breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)
	e.Signal = decide.SignalProbe
	cur := breakertest.WithEntries(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail),
		breakertest.Webhook(breakertest.WhB, breakertest.PolicyFail)), circuit.Record{breakertest.WhA: e})
	r, trigger := runnerFor(t, cur, opening, breakertest.FailedResult(probe.ReasonTimeout))
	r.Targets = []config.Target{closing, opening}
	scraper := &blockingScraper{release: make(chan struct{})}
	defer close(scraper.release)
	r.Scraper = scraper
	r.signal = newAPIServerSignal(r.Targets, 0)
	for range 2 {
		r.State.Observe(closing.Key(), breakertest.HealthyResult(), breakertest.Now)
		r.State.Observe(opening.Key(), breakertest.FailedResult(probe.ReasonTimeout), breakertest.Now)
	}
	_, changes, err := decide.Plan(cur, r.inputs(opening.Kind, cur))
	require.NoError(t, err)
	require.Len(t, changes, 1, "before this probe only the closing is due")

	go r.ProbeOnce(context.Background(), opening)
	select {
	case <-trigger:
	case <-time.After(5 * time.Second):
		t.Fatal("the opening waited for the closing's read of /metrics")
	}
}
