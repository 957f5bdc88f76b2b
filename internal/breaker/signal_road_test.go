package breaker

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

func roadTargetFor(webhook, service string) roadTarget {
	tgt := breakertest.Target(webhook, config.ModeBypass, 3, 2)
	tgt.Probe.Interval = time.Second
	return roadTarget{t: tgt, svc: admissionregistrationv1.ServiceReference{Namespace: "webhooks", Name: service, Port: ptr.To[int32](443)}, path: "/", timeout: 4 * time.Second}
}

func TestRoadSchedule_oneProbePerServiceAndInterval(t *testing.T) {
	s := newRoadSchedule()
	s.set(roadTargetFor("a.example.com", "hook"))
	s.set(roadTargetFor("b.example.com", "hook"))
	rp, ok := s.next(breakertest.Now)
	require.True(t, ok)
	assert.Len(t, rp.members, 2, "two webhooks behind one Service share one probe")
	s.done(rp, probe.Result{Outcome: probe.OutcomeHealthy})
	_, ok = s.next(breakertest.Now.Add(500 * time.Millisecond))
	assert.False(t, ok, "not due before its interval")
	_, ok = s.next(breakertest.Now.Add(time.Second))
	assert.True(t, ok)
}

// sweep drives s for d from start, ticking as roadLoop does, and returns
// when each road's probes started; fail names the roads whose probes
// Fail (the others are Healthy).
func sweep(s *roadSchedule, start time.Time, d time.Duration, fail func(road string) bool) map[string][]time.Time {
	probed := map[string][]time.Time{}
	tick := time.Second / SuspectPathProbesPerSecond
	for now := start; now.Before(start.Add(d)); now = now.Add(tick) {
		if rp, ok := s.next(now); ok {
			probed[rp.road] = append(probed[rp.road], now)
			res := probe.Result{Outcome: probe.OutcomeHealthy}
			if fail(rp.road) {
				res = probe.Result{Outcome: probe.OutcomeFailed, Reason: probe.ReasonRefused}
			}
			s.done(rp, res)
		}
	}
	return probed
}

func starts(probed map[string][]time.Time) int {
	n := 0
	for _, at := range probed {
		n += len(at)
	}
	return n
}

func TestRoadSchedule_budgetRoundRobin(t *testing.T) {
	const services = 25
	s := newRoadSchedule()
	for i := range services {
		s.set(roadTargetFor(fmt.Sprintf("w%d.example.com", i), fmt.Sprintf("hook-%d", i)))
	}
	probed := sweep(s, breakertest.Now, 60*time.Second, func(string) bool { return false })
	require.Len(t, probed, services)
	assert.LessOrEqual(t, starts(probed), int(60*time.Second/PathProbeGap)+1, "more starts than the budget while every road answers")
	every := services * PathProbeGap
	for road, at := range probed {
		for i := 1; i < len(at); i++ {
			assert.LessOrEqual(t, at[i].Sub(at[i-1]), every, "%s waited longer than services × PathProbeGap", road)
		}
	}
}

// A failing road raises the budget, and the failing roads come first:
// one cut road among 25 is probed every interval once it has failed, and
// the healthy ones keep within the suspect budget.
func TestRoadSchedule_aFailingRoadComesFirstWithinTheSuspectBudget(t *testing.T) {
	const services = 25
	s := newRoadSchedule()
	for i := range services {
		s.set(roadTargetFor(fmt.Sprintf("w%d.example.com", i), fmt.Sprintf("hook-%d", i)))
	}
	cut := roadKey(roadTargetFor("w7.example.com", "hook-7").svc)
	probed := sweep(s, breakertest.Now, 30*time.Second, func(road string) bool { return road == cut })
	at := probed[cut]
	require.NotEmpty(t, at)
	assert.LessOrEqual(t, at[0].Sub(breakertest.Now), services*PathProbeGap+time.Second, "the cut road is found within one sweep at the steady budget")
	for i := 1; i < len(at); i++ {
		assert.LessOrEqual(t, at[i].Sub(at[i-1]), time.Second+time.Second/SuspectPathProbesPerSecond, "a failing road is probed every interval")
	}
	assert.LessOrEqual(t, starts(probed), 30*SuspectPathProbesPerSecond, "more starts than the suspect budget")
	assert.Greater(t, starts(probed), int(30*time.Second/PathProbeGap)+1, "the budget did not rise while a road failed")

	// Once it answers again, the budget falls back.
	later := sweep(s, breakertest.Now.Add(time.Minute), 30*time.Second, func(string) bool { return false })
	assert.LessOrEqual(t, starts(later), int(30*time.Second/PathProbeGap)+1)
}

// A probe that hung through a cut and fails after a later probe of the
// same road answered counts for nothing, and leaves the road healthy.
func TestRoadSchedule_aLateFailureAfterALaterAnswerIsDropped(t *testing.T) {
	s := newRoadSchedule()
	s.set(roadTargetFor("a.example.com", "hook"))
	hung, ok := s.next(breakertest.Now)
	require.True(t, ok)
	healed, ok := s.next(breakertest.Now.Add(time.Second))
	require.True(t, ok)
	assert.True(t, s.done(healed, probe.Result{Outcome: probe.OutcomeHealthy}))
	assert.False(t, s.done(hung, probe.Result{Outcome: probe.OutcomeFailed, Reason: probe.ReasonTimeout}), "the earlier probe's failure is stale")
	assert.Empty(t, s.failing, "a stale failure marked the road failing")
	third, ok := s.next(breakertest.Now.Add(2 * time.Second))
	require.True(t, ok)
	assert.True(t, s.done(third, probe.Result{Outcome: probe.OutcomeFailed, Reason: probe.ReasonTimeout}), "a later failure counts")
}

func TestRoadSchedule_atMostMaxProbesInFlight(t *testing.T) {
	s := newRoadSchedule()
	rt := roadTargetFor("a.example.com", "hook")
	s.set(rt)
	for i := range MaxProbesInFlight(rt.t, false) {
		_, ok := s.next(breakertest.Now.Add(time.Duration(i) * time.Second))
		require.True(t, ok)
	}
	_, ok := s.next(breakertest.Now.Add(time.Hour))
	assert.False(t, ok, "a hanging road holds no more than MaxProbesInFlight probes")
}

// failingPathProber's probes fail to connect.
type failingPathProber struct{ calls atomic.Int32 }

func (p *failingPathProber) Probe(context.Context, admissionregistrationv1.ServiceReference, string, time.Duration) probe.Result {
	p.calls.Add(1)
	return probe.Result{Outcome: probe.OutcomeFailed, Reason: probe.ReasonRefused, Err: fmt.Errorf("error trying to reach service: dial tcp 10.1.2.3:8443: connect: connection refused")}
}

// A cut road behind a healthy webhook wakes the reconciler to open after
// openAfter path probes, one per interval, with no apiserver observation.
func TestProbeRunner_roadScheduleOpensOnTheRoadAlone(t *testing.T) {
	wh := breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)
	wh.ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "webhooks", Name: "hook", Port: ptr.To[int32](443)}}
	tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
	tgt.Probe.Interval = time.Second
	tgt.APIServerSignal.PathProbe.Service = &config.Service{Namespace: "webhooks", Name: "hook", Port: 443}
	r, trigger := runnerFor(t, breakertest.Config(wh), tgt, breakertest.HealthyResult())
	pp := &failingPathProber{}
	r.PathProber = pp
	clock := r.Clock.(*clocktesting.FakeClock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Start(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	require.Eventually(t, clock.HasWaiters, time.Second, time.Millisecond, "the runner started")
	for elapsed := time.Duration(0); elapsed < 4*time.Second && len(trigger) == 0; elapsed += 100 * time.Millisecond {
		require.Eventually(t, clock.HasWaiters, time.Second, time.Millisecond)
		clock.Step(100 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	require.Eventually(t, func() bool { return len(trigger) > 0 }, 2*time.Second, time.Millisecond, "no wake after %d path probes", pp.calls.Load())
	st, _ := r.State.Get(tgt.Key())
	assert.GreaterOrEqual(t, st.Path.Failures, 3)
	in := r.State.Inputs(r.Targets, clock.Now(), "", "1")
	action, signal := decide.JudgeTarget(false, circuit.Entry{}, in.Evidence[breakertest.WhA].Probe, in.Evidence[breakertest.WhA].APIServer,
		in.Evidence[breakertest.WhA].Path, tgt)
	assert.Equal(t, decide.Open, action)
	assert.Equal(t, decide.SignalRoad, signal)
}

// BenchmarkRoadSchedule_aSecondAt1000 is one second of the road
// schedule's work at 1,000 service-backed targets probed every second:
// each probe notes its target again (set) and the road loop asks for the
// next road ten times.
//
//	go test ./internal/breaker/ -run '^$' -bench RoadSchedule -benchmem
func BenchmarkRoadSchedule_aSecondAt1000(b *testing.B) {
	rts := make([]roadTarget, 1000)
	for i := range rts {
		rts[i] = roadTargetFor(fmt.Sprintf("w%04d.example.com", i), fmt.Sprintf("hook-%04d", i))
	}
	s := newRoadSchedule()
	now := breakertest.Now
	for b.Loop() {
		for _, rt := range rts {
			s.set(rt)
		}
		for range SuspectPathProbesPerSecond {
			now = now.Add(time.Second / SuspectPathProbesPerSecond)
			if rp, ok := s.next(now); ok {
				s.done(rp, probe.Result{Outcome: probe.OutcomeHealthy})
			}
		}
	}
}

// The schedule's grouping follows its targets: a target that moves to
// another Service is probed on the new road, and a dropped one on none.
func TestRoadSchedule_followsItsTargets(t *testing.T) {
	s := newRoadSchedule()
	s.set(roadTargetFor("a.example.com", "old"))
	rp, ok := s.next(breakertest.Now)
	require.True(t, ok)
	assert.Equal(t, "webhooks/https:old:443", rp.road)
	s.done(rp, probe.Result{Outcome: probe.OutcomeHealthy})

	s.set(roadTargetFor("a.example.com", "new"))
	rp, ok = s.next(breakertest.Now.Add(time.Second))
	require.True(t, ok)
	assert.Equal(t, "webhooks/https:new:443", rp.road, "the target moved to another Service")
	s.done(rp, probe.Result{Outcome: probe.OutcomeHealthy})

	s.drop(rp.members[0].t.Key())
	_, ok = s.next(breakertest.Now.Add(2 * time.Second))
	assert.False(t, ok, "no target, no road")
}

// A hurried road goes next, after the failing roads and before the least
// recently probed, once: one cut Service among 200, which at the steady
// budget waits up to 140 s for its turn, is probed at the next start once
// kube-apiserver's calls to its webhook fail.
func TestRoadSchedule_aHurriedRoadGoesNextOnce(t *testing.T) {
	const services = 200
	s := newRoadSchedule()
	for i := range services {
		s.set(roadTargetFor(fmt.Sprintf("w%d.example.com", i), fmt.Sprintf("hook-%d", i)))
	}
	// Every road probed once, healthy: the schedule is in its steady
	// round robin.
	probed := sweep(s, breakertest.Now, services*PathProbeGap, func(string) bool { return false })
	require.Len(t, probed, services)
	now := breakertest.Now.Add(services * PathProbeGap)

	hurried := roadTargetFor("w150.example.com", "hook-150")
	s.hurry(hurried.t.Key())
	s.hurry("not/a-target") // nothing
	rp, ok := s.next(now)
	require.True(t, ok)
	assert.Equal(t, roadKey(hurried.svc), rp.road, "the hurried road did not go next")
	s.done(rp, probe.Result{Outcome: probe.OutcomeHealthy})
	rp, ok = s.next(now.Add(time.Second))
	require.True(t, ok)
	assert.NotEqual(t, roadKey(hurried.svc), rp.road, "a road is hurried once, not again")
	s.done(rp, probe.Result{Outcome: probe.OutcomeHealthy})
	assert.Empty(t, s.hurried)

	// A failing road still goes first.
	failing := roadTargetFor("w3.example.com", "hook-3")
	s.failing[roadKey(failing.svc)] = true
	s.hurry(hurried.t.Key())
	rp, ok = s.next(now.Add(2 * time.Second))
	require.True(t, ok)
	assert.Equal(t, roadKey(failing.svc), rp.road)
	s.done(rp, probe.Result{Outcome: probe.OutcomeFailed, Reason: probe.ReasonRefused})
	rp, ok = s.next(now.Add(2*time.Second + time.Second/SuspectPathProbesPerSecond))
	require.True(t, ok)
	assert.Equal(t, roadKey(hurried.svc), rp.road, "then the hurried one")
}

// kube-apiserver's calls to a service-backed webhook failing hurry its
// road; healthy calls do not.
func TestProbeRunner_failingApiserverCallsHurryTheRoad(t *testing.T) {
	for name, failing := range map[string]bool{"failing calls": true, "healthy calls": false} {
		t.Run(name, func(t *testing.T) {
			wh := breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)
			wh.ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "webhooks", Name: "hook", Port: ptr.To[int32](443)}}
			tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
			tgt.APIServerSignal.PathProbe.Service = &config.Service{Namespace: "webhooks", Name: "hook", Port: 443}
			r, _ := runnerFor(t, breakertest.Config(wh), tgt, breakertest.HealthyResult())
			r.roads = newRoadSchedule()
			scraper := &fakeScraper{}
			for i := range 3 {
				if failing {
					scraper.samples = append(scraper.samples, sample(float64(40*i), float64(37*i)))
				} else {
					scraper.samples = append(scraper.samples, sample(float64(40*i), 0))
				}
			}
			r.Scraper = scraper
			s := newAPIServerSignal(r.Targets, 0)
			require.NotNil(t, s)
			ctx := context.Background()
			clock := r.Clock.(*clocktesting.FakeClock)
			r.ProbeOnce(ctx, r.Targets[0]) // notes its road
			require.True(t, r.roads.has(tgt.Key()))
			for range 2 {
				clock.Step(time.Second)
				r.ScrapeOnce(ctx, s)
			}
			road := roadKey(*wh.ClientConfig.Service)
			assert.Equal(t, failing, r.roads.hurried[road])
		})
	}
}
