package breaker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

func TestState_Inputs_holdOpen(t *testing.T) {
	key := func(i int) string { return fmt.Sprintf("Mutating/cfg/w%d.example.com", i) }
	cases := map[string]struct {
		hold    int
		results []probe.Result
		want    bool
	}{
		"two targets failing":                    {2, []probe.Result{breakertest.FailedResult(probe.ReasonTimeout), breakertest.FailedResult(probe.ReasonRefused)}, true},
		"one of them healthy":                    {2, []probe.Result{breakertest.FailedResult(probe.ReasonTimeout), breakertest.HealthyResult()}, false},
		"a single target never holds":            {2, []probe.Result{breakertest.FailedResult(probe.ReasonTimeout)}, false},
		"unknown results are not counted":        {2, []probe.Result{breakertest.FailedResult(probe.ReasonTimeout), {Outcome: probe.OutcomeUnknown}}, false},
		"two failing under a threshold of three": {3, []probe.Result{breakertest.FailedResult(probe.ReasonTimeout), breakertest.FailedResult(probe.ReasonRefused)}, false},
		"switched off":                           {0, []probe.Result{breakertest.FailedResult(probe.ReasonTimeout), breakertest.FailedResult(probe.ReasonRefused)}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := NewState()
			s.HoldWhenAllFail = tc.hold
			for i, r := range tc.results {
				s.Register(key(i))
				if r.Outcome != "" {
					s.Observe(key(i), r, breakertest.Now)
				}
			}
			assert.Equal(t, tc.want, s.Inputs(nil, breakertest.Now, "", "").HoldOpen)
		})
	}
}

func TestState_ObserveAPIServer_oldFailuresExpire(t *testing.T) {
	tgt := breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2)
	s := NewState()
	s.Configure([]config.Target{tgt})
	s.Register(tgt.Key())
	failed := probe.Result{Outcome: probe.OutcomeFailed, Reason: decide.ReasonAPIServerCalls, Err: errors.New("calls failed")}
	s.ObserveAPIServer(tgt.Key(), failed, time.Time{}, 0, 0, false)
	s.ObserveAPIServer(tgt.Key(), failed, time.Time{}, 0, 0, false)
	for range 3 {
		s.ObserveAPIServer(tgt.Key(), breakertest.UnknownResult(), time.Time{}, 0, 0, false)
	}
	st := s.ObserveAPIServer(tgt.Key(), failed, time.Time{}, 0, 0, false)
	assert.Equal(t, 1, st.APIServer.Failures, "two failures %d scrapes old do not complete a run with a third", tgt.OpenAfter)

	s.ObserveAPIServer(tgt.Key(), failed, time.Time{}, 0, 0, false)
	s.ObserveAPIServer(tgt.Key(), breakertest.UnknownResult(), time.Time{}, 0, 0, false)
	st = s.ObserveAPIServer(tgt.Key(), failed, time.Time{}, 0, 0, false)
	assert.Equal(t, 3, st.APIServer.Failures, "one Unknown between failures still counts them")
}
