package breaker

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// holdTargets are n mutating targets of one configuration, probed every
// second, opening after one failure.
func holdTargets(n int) []config.Target {
	var out []config.Target
	for _, hook := range []string{breakertest.WhA, breakertest.WhB, breakertest.WhOther}[:n] {
		t := breakertest.Target(hook, config.ModeBypass, 1, 1)
		t.Probe.Interval = time.Second
		out = append(out, t)
	}
	return out
}

func holdState(targets []config.Target, hold int) *State {
	s := NewState()
	s.HoldWhenAllFail = hold
	s.Configure(targets)
	for _, t := range targets {
		s.Register(t.Key())
	}
	return s
}

// A result older than HoldFreshFor intervals says nothing about the
// guard's network now: a target whose last probe was healthy long ago (its
// traffic stood in for the probe, say) neither lifts nor makes a hold.
func TestState_HoldOpen_onlyFreshResults(t *testing.T) {
	tgts := holdTargets(3)
	s := holdState(tgts, 2)
	s.Observe(tgts[2].Key(), breakertest.HealthyResult(), breakertest.Now)
	later := breakertest.Now.Add(2 * time.Second)
	s.Observe(tgts[0].Key(), breakertest.FailedResult(probe.ReasonTimeout), later)
	s.Observe(tgts[1].Key(), breakertest.FailedResult(probe.ReasonRefused), later)
	held, _ := s.HoldOpen(later)
	assert.False(t, held, "a fresh healthy result lifts the hold")

	stale := breakertest.Now.Add(HoldFreshFor*time.Second + time.Millisecond)
	s.Observe(tgts[0].Key(), breakertest.FailedResult(probe.ReasonTimeout), stale)
	s.Observe(tgts[1].Key(), breakertest.FailedResult(probe.ReasonRefused), stale)
	held, _ = s.HoldOpen(stale)
	assert.True(t, held, "a stale healthy result does not lift it")
}

// A hold keeps an opening back for at most HoldBoundIntervals probe
// intervals after the first held target reached its threshold; then it
// says it expired, and Inputs no longer holds.
func TestState_HoldOpen_bounded(t *testing.T) {
	tgts := holdTargets(2)
	s := holdState(tgts, 2)
	at := breakertest.Now
	fail := func() {
		for _, tg := range tgts {
			s.Observe(tg.Key(), breakertest.FailedResult(probe.ReasonTimeout), at)
		}
	}
	fail()
	held, expired := s.HoldOpen(at)
	assert.True(t, held)
	assert.False(t, expired)
	for i := 1; i < HoldBoundIntervals; i++ {
		at = at.Add(time.Second)
		fail()
		held, _ = s.HoldOpen(at)
		assert.True(t, held, "still within the bound after %d intervals", i)
		assert.True(t, s.Inputs(tgts, at, "", "").HoldOpen)
	}
	at = at.Add(time.Second)
	fail()
	held, expired = s.HoldOpen(at)
	assert.False(t, held, "held past its bound")
	assert.True(t, expired)
	assert.False(t, s.Inputs(tgts, at, "", "").HoldOpen)

	// One healthy result ends the episode; the next one is held afresh.
	at = at.Add(time.Second)
	s.Observe(tgts[0].Key(), breakertest.HealthyResult(), at)
	held, expired = s.HoldOpen(at)
	assert.False(t, held)
	assert.False(t, expired)
	at = at.Add(time.Second)
	fail()
	held, _ = s.HoldOpen(at)
	assert.True(t, held)
}

// Webhooks served by one backend (one Service and port, or one URL host)
// fail together when that backend fails: they count as one, so three
// webhooks of one crash-looping Deployment are not "everything failing".
func TestState_HoldOpen_sharedBackendCountsOnce(t *testing.T) {
	cases := map[string]struct {
		backends []string
		want     bool
	}{
		"three webhooks of one Service":       {[]string{"service:ns/svc:443", "service:ns/svc:443", "service:ns/svc:443"}, false},
		"two of one Service, one elsewhere":   {[]string{"service:ns/svc:443", "service:ns/svc:443", "url:10.0.0.1:8443"}, false},
		"three backends":                      {[]string{"service:ns/svc:443", "service:ns/other:443", "url:10.0.0.1:8443"}, true},
		"one Service on two ports is two, +1": {[]string{"service:ns/svc:443", "service:ns/svc:8443", "url:10.0.0.1:8443"}, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tgts := holdTargets(3)
			s := holdState(tgts, 3)
			for i, tg := range tgts {
				s.SetBackend(tg.Key(), tc.backends[i])
				s.Observe(tg.Key(), breakertest.FailedResult(probe.ReasonTimeout), breakertest.Now)
			}
			held, _ := s.HoldOpen(breakertest.Now)
			assert.Equal(t, tc.want, held)
		})
	}
}

func TestBackend(t *testing.T) {
	svc := breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)
	assert.Equal(t, "service:ns/svc:8443", decide.Backend(&svc))
	svc.ClientConfig.Service.Port = nil
	assert.Equal(t, "service:ns/svc:443", decide.Backend(&svc), "clientConfig.service.port defaults to 443")
	u := breakertest.Webhook(breakertest.WhB, breakertest.PolicyFail)
	u.ClientConfig.Service = nil
	u.ClientConfig.URL = ptr.To("https://hooks.example.com:9443/mutate?x=1")
	assert.Equal(t, "url:hooks.example.com:9443", decide.Backend(&u))
}

// An episode of every target failing at once keeps openings back for at
// most HoldBoundIntervals probe intervals, whatever the guard's own probes
// do meanwhile. At a thousand targets inside its CPU limit the guard's
// probes often say Unknown (timed out while the guard itself was
// throttled) or are not sent at all (the recovery dial budget): neither is
// news of a webhook, and neither may start the hold's bound again.
func TestState_HoldOpen_boundHoldsThroughTheEpisode(t *testing.T) {
	cases := map[string]struct {
		// lagging says what the fourth target's probes do after its last
		// healthy result, before the failure: at the seconds where it
		// returns true, a probe that says Unknown; otherwise none is sent.
		lagging func(second int) bool
		// silent are seconds in which no probe of any target comes back.
		silent func(second int) bool
	}{
		"a target whose probes say Unknown every few seconds after a healthy result": {
			lagging: func(s int) bool { return s%5 == 0 },
			silent:  func(int) bool { return false },
		},
		"every probe stops for longer than the freshness window, then fails again": {
			lagging: func(int) bool { return false },
			silent:  func(s int) bool { return s >= 8 && s < 13 || s >= 20 && s < 25 },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var tgts []config.Target
			for i := range 4 {
				tg := breakertest.Target(fmt.Sprintf("w%d.example.com", i), config.ModeBypass, 1, 1)
				tg.Probe.Interval = time.Second
				tgts = append(tgts, tg)
			}
			s := holdState(tgts, 3)
			start := breakertest.Now
			for _, tg := range tgts {
				s.Observe(tg.Key(), breakertest.HealthyResult(), start)
			}
			var firstHeld time.Time
			for second := 1; second <= 40; second++ {
				at := start.Add(time.Duration(second) * time.Second)
				if !tc.silent(second) {
					for _, tg := range tgts[:3] {
						s.Observe(tg.Key(), breakertest.FailedResult(probe.ReasonTimeout), at)
					}
					if tc.lagging(second) {
						s.Observe(tgts[3].Key(), probe.Result{Outcome: probe.OutcomeUnknown}, at)
					}
				}
				held, _ := s.HoldOpen(at)
				if held && firstHeld.IsZero() {
					firstHeld = at
				}
				if held {
					assert.Less(t, at.Sub(firstHeld), HoldBoundIntervals*time.Second,
						"second %d: openings still held %s after the hold first kept one back", second, at.Sub(firstHeld))
				}
				assert.Equal(t, held, s.Inputs(tgts, at, "", "").HoldOpen, "second %d: Inputs and HoldOpen disagree", second)
			}
			assert.False(t, firstHeld.IsZero(), "every target failing never held an opening")
		})
	}
}

// massTargets are n mutating targets in configurations of ten, each on a
// backend of its own, probed every second, opening after two failures:
// the bench's mass failure.
func massTargets(n int) []config.Target {
	out := make([]config.Target, 0, n)
	for i := 0; i < n; i++ {
		t := breakertest.Target(fmt.Sprintf("w%d.example.com", i), config.ModeBypass, 2, 2)
		t.Configuration = fmt.Sprintf("c%d", i/10)
		t.Probe.Interval = time.Second
		out = append(out, t)
	}
	return out
}

// failRound is one probe round of a mass failure in which every target
// fails again, its results spread over the second from at, as the probe
// runner records them: each result, then the hold's judgement
// (HoldOpen), then the inputs of its configuration for the decision
// whether to wake the reconciler.
func failRound(s *State, tgts []config.Target, at time.Time) {
	step := time.Second / time.Duration(len(tgts))
	for i, t := range tgts {
		now := at.Add(time.Duration(i) * step)
		s.SetBackend(t.Key(), "url:"+t.Webhook)
		s.Observe(t.Key(), breakertest.FailedResult(probe.ReasonTimeout), now)
		s.HoldOpen(now)
		s.Inputs([]config.Target{t}, now, "", "")
	}
}

// A mass failure's judgement of the hold costs a scan of every target
// once per verdictRecheck, not once per probe result: with 1,000 targets
// failing past their threshold, a round of 1,000 results over a second
// judges about twenty times. Judged on every result, the round scanned
// 1,000 targets 2,000 times, inside the Deployment's half a core.
func TestState_allFailing_isJudgedOncePerRecheckInAMassFailure(t *testing.T) {
	tgts := massTargets(1000)
	s := holdState(tgts, config.DefaultHoldWhenAllFail)
	at := breakertest.Now
	for i := 0; i < 2; i++ { // past the threshold
		failRound(s, tgts, at)
		at = at.Add(time.Second)
	}
	before := s.scans
	failRound(s, tgts, at)
	assert.LessOrEqual(t, s.scans-before, 25, "judged %d times in a round of 1,000 results", s.scans-before)
	held, _ := s.HoldOpen(at.Add(time.Second))
	assert.True(t, held, "the verdict is the same")

	// A healthy result is judged at once.
	s.Observe(tgts[0].Key(), breakertest.HealthyResult(), at.Add(time.Second))
	held, _ = s.HoldOpen(at.Add(time.Second))
	assert.False(t, held, "a healthy result ends the hold at once")
}

// BenchmarkState_massFailureRound is one probe round of failRound over
// 1,000 targets.
func BenchmarkState_massFailureRound(b *testing.B) {
	tgts := massTargets(1000)
	s := holdState(tgts, config.DefaultHoldWhenAllFail)
	at := breakertest.Now
	for i := 0; i < 2; i++ {
		failRound(s, tgts, at)
		at = at.Add(time.Second)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		at = at.Add(time.Second)
		failRound(s, tgts, at)
	}
}
