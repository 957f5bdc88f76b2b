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

	"github.com/webhook-guard/webhook-guard/internal/apimetrics"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

func apiserverFailing(n int) Counts {
	var c Counts
	for range n {
		c.Observe(probe.Result{Outcome: probe.OutcomeFailed, Reason: ReasonAPIServerCalls, Err: errors.New("apiserver: 37 of 40 calls failed (calling_webhook_error or fail-open) in the last 1s")})
	}
	return c
}

func withSignal(t config.Target) config.Target {
	t.APIServerSignal = config.APIServerSignal{Enabled: true, MinRequests: 3, FailureRatio: 0.5}
	return t
}

func TestDecideTarget(t *testing.T) {
	unknownAfterFailing := apiserverFailing(2)
	unknownAfterFailing.Observe(probe.Result{Outcome: probe.OutcomeUnknown})
	// An open circuit's probe that failed, then could not run.
	probeUnknown := func(n int) Counts {
		c := failing(3, probe.ReasonTimeout)
		for range n {
			c.Observe(probe.Result{Outcome: probe.OutcomeUnknown})
		}
		return c
	}
	cases := map[string]struct {
		open       bool
		probe, api Counts
		mode       config.Mode
		disabled   bool
		want       Action
		wantSignal string
	}{
		"the probe alone opens":                                     {probe: failing(3, probe.ReasonTimeout), api: healthy(5), want: Open, wantSignal: SignalProbe},
		"the apiserver alone opens while the probe is healthy":      {probe: healthy(9), api: apiserverFailing(3), want: Open, wantSignal: SignalAPIServer},
		"both at once open once, named both":                        {probe: failing(3, probe.ReasonTimeout), api: apiserverFailing(3), want: Open, wantSignal: SignalBoth},
		"a disabled apiserver signal opens nothing":                 {probe: healthy(9), api: apiserverFailing(9), disabled: true, want: Stay},
		"too few failing intervals open nothing":                    {probe: failing(2, probe.ReasonTimeout), api: apiserverFailing(2), want: Stay},
		"Bypass closes on the probe alone (no traffic while open)":  {open: true, mode: config.ModeBypass, probe: healthy(2), api: apiserverFailing(4), want: Close},
		"Ignore does not close while the apiserver's calls fail":    {open: true, mode: config.ModeIgnore, probe: healthy(9), api: apiserverFailing(1), want: Stay},
		"Ignore closes once the apiserver's calls stop (Unknown)":   {open: true, mode: config.ModeIgnore, probe: healthy(2), api: unknownAfterFailing, want: Close},
		"Ignore closes once the apiserver's calls succeed":          {open: true, mode: config.ModeIgnore, probe: healthy(2), api: healthy(1), want: Close},
		"Ignore ignores the apiserver when the signal is disabled":  {open: true, mode: config.ModeIgnore, probe: healthy(2), api: apiserverFailing(1), disabled: true, want: Close},
		"an open circuit never closes on the apiserver signal only": {open: true, mode: config.ModeIgnore, probe: healthy(1), api: healthy(9), want: Stay},
		"a probe Unknown for closeAfter intervals closes when the apiserver's calls succeed": {
			open: true, mode: config.ModeIgnore, probe: probeUnknown(2), api: healthy(2), want: Close, wantSignal: SignalAPIServer},
		"a probe Unknown for closeAfter intervals holds while the apiserver's calls fail": {
			open: true, mode: config.ModeIgnore, probe: probeUnknown(2), api: apiserverFailing(5), want: Stay},
		"a probe Unknown for closeAfter intervals holds without apiserver traffic (Bypass)": {
			open: true, mode: config.ModeBypass, probe: probeUnknown(5), api: unknownAfterFailing, want: Stay},
		"a probe Unknown for fewer than closeAfter intervals waits": {
			open: true, mode: config.ModeIgnore, probe: probeUnknown(1), api: healthy(9), want: Stay},
		"a probe Unknown holds when the apiserver signal is disabled": {
			open: true, mode: config.ModeIgnore, probe: probeUnknown(9), api: healthy(9), disabled: true, want: Stay},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tgt := withSignal(target(whA, tc.mode, 3, 2))
			tgt.APIServerSignal.Enabled = !tc.disabled
			action, signal := DecideTarget(tc.open, tc.probe, tc.api, tgt)
			assert.Equal(t, tc.want, action)
			assert.Equal(t, tc.wantSignal, signal)
		})
	}
}

func TestPlan_apiserverSignalOpensAndSaysWhy(t *testing.T) {
	cur := newConfig(newWebhook(whA, policyFail))
	tgt := withSignal(target(whA, config.ModeBypass, 3, 2))
	in := Inputs{
		Targets: []config.Target{tgt}, Now: testNow, Identity: "breaker",
		Counts: map[string]Counts{whA: healthy(7)}, APIServer: map[string]Counts{whA: apiserverFailing(3)},
	}
	next, changes, err := Plan(cur, in)
	require.NoError(t, err)
	require.Len(t, changes, 1)
	assert.Equal(t, Opened, changes[0].Kind)
	assert.Equal(t, SignalAPIServer, changes[0].Signal)
	assert.Equal(t, "opened the circuit on "+whA+" in Bypass mode after 3 consecutive failing intervals of the apiserver's own calls "+
		"(last: apiserver: 37 of 40 calls failed (calling_webhook_error or fail-open) in the last 1s) while the direct probe was healthy: "+
		"the apiserver's path to the webhook is broken (konnectivity, a firewall or a NetworkPolicy between the control plane and the webhook); original failurePolicy Fail",
		changes[0].Message)
	entry := mustRecord(t, next)[whA]
	assert.Equal(t, SignalAPIServer, entry.Signal)
	assert.Equal(t, string(ReasonAPIServerCalls), entry.Reason)
	assert.Equal(t, policyFail, entry.OriginalFailurePolicy)
	assert.True(t, isBypassed(next, whA))

	t.Run("an outage both signals see is one change, named both", func(t *testing.T) {
		in.Counts[whA] = failing(3, probe.ReasonTimeout)
		_, changes, err := Plan(cur, in)
		require.NoError(t, err)
		require.Len(t, changes, 1)
		assert.Equal(t, SignalBoth, changes[0].Signal)
	})
	t.Run("the hold stops probe openings but not the apiserver's", func(t *testing.T) {
		in := in
		in.HoldOpen = true
		in.Counts = map[string]Counts{whA: failing(3, probe.ReasonTimeout)}
		in.APIServer = map[string]Counts{whA: healthy(3)}
		_, changes, err := Plan(cur, in)
		require.NoError(t, err)
		assert.Empty(t, changes, "every probe failing at once, the apiserver's calls fine: the guard's network")
		in.APIServer = map[string]Counts{whA: apiserverFailing(3)}
		_, changes, err = Plan(cur, in)
		require.NoError(t, err)
		require.Len(t, changes, 1, "the apiserver agrees the webhook is down")
	})
}

func isBypassed(mwc *admissionregistrationv1.MutatingWebhookConfiguration, name string) bool {
	wh := webhook(mwc, name)
	return wh != nil && bypassIndex(wh) >= 0 && *wh.FailurePolicy == admissionregistrationv1.Ignore
}

func TestPlan_closingEventCountsWhatWasAdmittedWithoutTheWebhook(t *testing.T) {
	entry := entryFor(config.ModeBypass, policyFail)
	entry.OpenedAt.Time = testNow.Add(-13 * time.Minute).Truncate(time.Second)
	cur := withEntries(t, newConfig(newWebhook(whA, policyFail)), circuit.Record{whA: entry})
	in := Inputs{
		Targets: []config.Target{withSignal(target(whA, config.ModeBypass, 3, 2))}, Now: testNow,
		Counts: map[string]Counts{whA: healthy(2)}, APIServer: map[string]Counts{}, Admitted: map[string]float64{whA: 1234},
	}
	_, changes, err := Plan(cur, in)
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
		{Name: whA, Type: apimetrics.Mutating, MarkingPolicy: marking.Name(cfgName, whA)}: {Calls: calls, CallErrors: errs, Series: 2},
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

func TestProbeRunner_ScrapeOnce_opensOnTheApiserverSignalAndNamesTheDisagreement(t *testing.T) {
	tgt := withSignal(target(whA, config.ModeBypass, 3, 2))
	r, trigger := runnerFor(t, newConfig(newWebhook(whA, policyFail)), tgt, healthyResult())
	clock := r.Clock.(*clocktesting.FakeClock)
	scraper := &fakeScraper{}
	for i := range 5 {
		scraper.samples = append(scraper.samples, sample(float64(40*i), float64(37*i)))
	}
	r.Scraper = scraper
	s := newAPIServerSignal(r.Targets)
	require.NotNil(t, s)
	ctx := context.Background()
	r.ProbeOnce(ctx, r.Targets[0]) // the direct probe is healthy
	var woke []bool
	for range 4 {
		clock.Step(time.Second)
		r.ScrapeOnce(ctx, s)
		woke = append(woke, len(trigger) > 0)
		for len(trigger) > 0 {
			<-trigger
		}
	}
	assert.Equal(t, []bool{false, false, false, true}, woke, "the first scrape is a baseline; three failing intervals follow")
	st, _ := r.State.Get(tgt.Key())
	assert.Equal(t, 3, st.APIServer.Failures)
	assert.Equal(t, SignalAPIServer, st.Disagree)
	evs := drainEvents(r)
	require.Len(t, evs, 1)
	assert.Contains(t, evs[0], "SignalsDisagree")
	assert.Contains(t, evs[0], "the direct probe is healthy but the apiserver's own calls fail")
}

func TestProbeRunner_ScrapeOnce_missingRBACIsUnknownReportedOnce(t *testing.T) {
	tgt := withSignal(target(whA, config.ModeBypass, 3, 2))
	r, trigger := runnerFor(t, newConfig(newWebhook(whA, policyFail)), tgt, healthyResult())
	r.Scraper = &fakeScraper{err: fmt.Errorf("reading the apiserver's /metrics: %w", apierrors.NewForbidden(schema.GroupResource{}, "", errors.New("no")))}
	s := newAPIServerSignal(r.Targets)
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

func TestNewAPIServerSignal_oneScrapeAtTheShortestIntervalOfTheTargetsThatEnableIt(t *testing.T) {
	a := withSignal(target(whA, config.ModeBypass, 3, 2))
	a.Probe.Interval = 2 * time.Second
	b := withSignal(target(whB, config.ModeBypass, 3, 2))
	b.Probe.Interval = 500 * time.Millisecond
	c := target(whOther, config.ModeBypass, 3, 2)
	c.Probe.Interval = 100 * time.Millisecond
	s := newAPIServerSignal([]config.Target{a, b, c})
	assert.Equal(t, 500*time.Millisecond, s.interval)
	assert.Len(t, s.want, 2)
	assert.Nil(t, newAPIServerSignal([]config.Target{c}), "no target enables it: no scrape at all")
}

func TestPlan_bypassOpenedByTheApiserverStaysOpenAtLeastMinOpen(t *testing.T) {
	entry := entryFor(config.ModeBypass, policyFail)
	entry.Signal = SignalAPIServer
	entry.OpenedAt.Time = testNow.Add(-20 * time.Second).Truncate(time.Second)
	for name, tc := range map[string]struct {
		mode    config.Mode
		signal  string
		minOpen time.Duration
		closes  bool
	}{
		"not before MinOpen":                              {mode: config.ModeBypass, signal: SignalAPIServer, minOpen: 30 * time.Second, closes: false},
		"after MinOpen, as a trial":                       {mode: config.ModeBypass, signal: SignalAPIServer, minOpen: 10 * time.Second, closes: true},
		"opened by both: the same":                        {mode: config.ModeBypass, signal: SignalBoth, minOpen: 30 * time.Second, closes: false},
		"opened by the probe: closeAfter alone":           {mode: config.ModeBypass, signal: SignalProbe, minOpen: 30 * time.Second, closes: true},
		"Ignore mode sees the apiserver's calls: no wait": {mode: config.ModeIgnore, signal: SignalAPIServer, minOpen: 30 * time.Second, closes: true},
	} {
		t.Run(name, func(t *testing.T) {
			e := entry
			e.Mode, e.Signal = tc.mode, tc.signal
			cur := withEntries(t, newConfig(newWebhook(whA, policyFail)), circuit.Record{whA: e})
			in := Inputs{
				Targets: []config.Target{withSignal(target(whA, tc.mode, 3, 2))}, Now: testNow,
				Counts: map[string]Counts{whA: healthy(5)}, MinOpen: map[string]time.Duration{whA: tc.minOpen},
			}
			_, changes, err := Plan(cur, in)
			require.NoError(t, err)
			assert.Equal(t, tc.closes, len(changes) == 1)
		})
	}
}

func TestState_minOpenDoublesPerReopeningUntilTheApiserverIsHealthy(t *testing.T) {
	s := NewState()
	tgt := withSignal(target(whA, config.ModeBypass, 3, 2))
	tgt.APIServerSignal.MinOpen = time.Second
	minOpenNow := func() time.Duration {
		return s.Inputs([]config.Target{tgt}, testNow, "", "1").MinOpen[whA]
	}
	s.Observe(tgt.Key(), healthyResult(), testNow)
	assert.Equal(t, time.Second, minOpenNow())
	s.NoteOpening(tgt.Key(), SignalProbe)
	assert.Equal(t, time.Second, minOpenNow(), "probe openings do not count")
	var got []time.Duration
	for range 8 {
		s.NoteOpening(tgt.Key(), SignalAPIServer)
		got = append(got, minOpenNow())
	}
	assert.Equal(t, []time.Duration{1, 2, 4, 8, 16, 32, 32, 32}, func() []time.Duration {
		out := make([]time.Duration, len(got))
		for i, d := range got {
			out[i] = d / time.Second
		}
		return out
	}())
	s.ObserveAPIServer(tgt.Key(), healthyResult(), 0, 0, false)
	assert.Equal(t, time.Second, minOpenNow(), "a healthy apiserver observation ends the backoff")
}

// An Ignore circuit whose probe can no longer run closes on the
// apiserver's successful calls, and the Event says so.
func TestPlan_closesAnUnknownProbesCircuitOnTheApiserversWord(t *testing.T) {
	cur := newConfig(newWebhook(whA, policyFail))
	tgt := withSignal(target(whA, config.ModeIgnore, 3, 2))
	in := Inputs{
		Targets: []config.Target{tgt}, Now: testNow, Identity: "breaker",
		Counts: map[string]Counts{whA: failing(3, probe.ReasonTimeout)}, APIServer: map[string]Counts{whA: healthy(1)},
	}
	open, changes, err := Plan(cur, in)
	require.NoError(t, err)
	require.Len(t, changes, 1)
	c := failing(3, probe.ReasonTimeout)
	for range 2 {
		c.Observe(probe.Result{Outcome: probe.OutcomeUnknown, Err: errors.New("no resource kube-apiserver serves matches")})
	}
	in.Counts[whA], in.APIServer[whA] = c, healthy(2)
	closed, changes, err := Plan(open, in)
	require.NoError(t, err)
	require.Len(t, changes, 1)
	assert.Equal(t, Closed, changes[0].Kind)
	assert.Contains(t, changes[0].Message, "after 2 intervals in which the probe could not run (last: no resource kube-apiserver serves matches) while the apiserver's own calls to the webhook succeeded for 2 intervals")
	assert.Equal(t, policyFail, webhook(closed, whA).FailurePolicy)
}
