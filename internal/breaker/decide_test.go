package breaker

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

func healthyResult() probe.Result {
	return probe.Result{Outcome: probe.OutcomeHealthy, HTTPStatus: 200}
}

func failedResult(reason probe.FailureReason) probe.Result {
	return probe.Result{Outcome: probe.OutcomeFailed, Reason: reason, Err: errors.New("probe failed: " + string(reason))}
}

func unknownResult() probe.Result {
	return probe.Result{Outcome: probe.OutcomeUnknown, Err: errors.New("guard could not probe")}
}

// observeSeq feeds a sequence written as letters: H healthy, F failed
// (reason timeout), U unknown.
func observeSeq(t *testing.T, c *Counts, seq string) {
	t.Helper()
	for _, ch := range seq {
		switch ch {
		case 'H':
			c.Observe(healthyResult())
		case 'F':
			c.Observe(failedResult(probe.ReasonTimeout))
		case 'U':
			c.Observe(unknownResult())
		default:
			t.Fatalf("bad sequence letter %q", ch)
		}
	}
}

func TestJudge_table(t *testing.T) {
	cases := map[string]struct {
		open                  bool
		failures, successes   int
		openAfter, closeAfter int
		want                  Action
	}{
		"a closed circuit with no probes stays":                       {open: false, openAfter: 3, closeAfter: 5, want: Stay},
		"a closed circuit below the failure threshold stays":          {open: false, failures: 2, openAfter: 3, closeAfter: 5, want: Stay},
		"a closed circuit at the failure threshold opens":             {open: false, failures: 3, openAfter: 3, closeAfter: 5, want: Open},
		"a closed circuit above the failure threshold opens":          {open: false, failures: 7, openAfter: 3, closeAfter: 5, want: Open},
		"a closed circuit with successes stays closed":                {open: false, successes: 10, openAfter: 3, closeAfter: 5, want: Stay},
		"an open circuit below the success threshold stays":           {open: true, successes: 4, openAfter: 3, closeAfter: 5, want: Stay},
		"an open circuit at the success threshold closes":             {open: true, successes: 5, openAfter: 3, closeAfter: 5, want: Close},
		"an open circuit above the success threshold closes":          {open: true, successes: 9, openAfter: 3, closeAfter: 5, want: Close},
		"an open circuit with failures stays open":                    {open: true, failures: 10, openAfter: 3, closeAfter: 5, want: Stay},
		"an open circuit with no probes stays":                        {open: true, openAfter: 3, closeAfter: 5, want: Stay},
		"a closed circuit with threshold one opens after one failure": {open: false, failures: 1, openAfter: 1, closeAfter: 1, want: Open},
		"a closed circuit with threshold one stays with no failure":   {open: false, successes: 1, openAfter: 1, closeAfter: 1, want: Stay},
		"an open circuit with threshold one closes after one success": {open: true, successes: 1, openAfter: 1, closeAfter: 1, want: Close},
		"an open circuit with threshold one stays with no success":    {open: true, failures: 1, openAfter: 1, closeAfter: 1, want: Stay},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := Counts{Failures: tc.failures, Successes: tc.successes}
			assert.Equal(t, tc.want, Judge(tc.open, c, tc.openAfter, tc.closeAfter))
		})
	}
}

func TestCounts_Observe_sequences(t *testing.T) {
	cases := map[string]struct {
		seq                 string
		failures, successes int
		last                probe.Outcome
		lastUnknown         bool
	}{
		"no probes leaves everything zero":                   {seq: "", last: ""},
		"two failures count two":                             {seq: "FF", failures: 2, last: probe.OutcomeFailed},
		"a success after failures resets the failures":       {seq: "FFH", successes: 1, last: probe.OutcomeHealthy},
		"a failure after a success resets the successes":     {seq: "FFHF", failures: 1, last: probe.OutcomeFailed},
		"alternating ends on the last outcome":               {seq: "HFHFHF", failures: 1, last: probe.OutcomeFailed},
		"a run of successes counts them all":                 {seq: "FHHHH", successes: 4, last: probe.OutcomeHealthy},
		"unknown in the middle of failures does not reset":   {seq: "FFUF", failures: 3, last: probe.OutcomeFailed},
		"unknown in the middle of successes does not reset":  {seq: "HUUH", successes: 2, last: probe.OutcomeHealthy},
		"trailing unknown keeps the counts and is recorded":  {seq: "FFU", failures: 2, last: probe.OutcomeFailed, lastUnknown: true},
		"only unknowns move nothing":                         {seq: "UUU", last: "", lastUnknown: true},
		"a known result after an unknown clears LastUnknown": {seq: "UH", successes: 1, last: probe.OutcomeHealthy},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var c Counts
			observeSeq(t, &c, tc.seq)
			assert.Equal(t, tc.failures, c.Failures, "failures")
			assert.Equal(t, tc.successes, c.Successes, "successes")
			assert.Equal(t, tc.last, c.Last.Outcome, "last outcome")
			if tc.lastUnknown {
				require.NotNil(t, c.LastUnknown)
				assert.Equal(t, probe.OutcomeUnknown, c.LastUnknown.Outcome)
			} else {
				assert.Nil(t, c.LastUnknown)
			}
		})
	}
}

func TestCounts_Observe_unknownMovesNothing(t *testing.T) {
	cases := map[string]Counts{
		"zero counts stay zero":                     {},
		"failures are not reset":                    {Failures: 2, Last: failedResult(probe.ReasonTLS)},
		"successes are not reset":                   {Successes: 4, Last: healthyResult()},
		"an earlier unknown is replaced by the new": {Failures: 1, Last: failedResult(probe.ReasonRefused), LastUnknown: &probe.Result{Outcome: probe.OutcomeUnknown}},
	}
	for name, before := range cases {
		t.Run(name, func(t *testing.T) {
			c := before
			u := unknownResult()
			c.Observe(u)
			assert.Equal(t, before.Failures, c.Failures)
			assert.Equal(t, before.Successes, c.Successes)
			assert.Equal(t, before.Last, c.Last, "Last is the last known result")
			require.NotNil(t, c.LastUnknown)
			assert.Equal(t, u, *c.LastUnknown, "LastUnknown is the newest unknown")
		})
	}
}

func TestCounts_Observe_lastBookkeeping(t *testing.T) {
	var c Counts
	c.Observe(failedResult(probe.ReasonRefused))
	c.Observe(failedResult(probe.ReasonTLS))
	assert.Equal(t, probe.ReasonTLS, c.Last.Reason, "Last is the most recent known result")
	assert.Nil(t, c.LastUnknown)

	u1 := unknownResult()
	c.Observe(u1)
	u2 := probe.Result{Outcome: probe.OutcomeUnknown, Err: errors.New("second unknown")}
	c.Observe(u2)
	assert.Equal(t, probe.ReasonTLS, c.Last.Reason, "unknowns do not replace Last")
	require.NotNil(t, c.LastUnknown)
	assert.Equal(t, "second unknown", c.LastUnknown.Err.Error(), "LastUnknown is the newest unknown")
	assert.Equal(t, 2, c.Failures)

	c.Observe(failedResult(probe.ReasonNoRoute))
	assert.Equal(t, 3, c.Failures)
	assert.Equal(t, probe.ReasonNoRoute, c.Last.Reason)
	assert.Nil(t, c.LastUnknown, "a known result clears LastUnknown")

	c.Observe(healthyResult())
	assert.Equal(t, 0, c.Failures)
	assert.Equal(t, 1, c.Successes)
	assert.Equal(t, probe.OutcomeHealthy, c.Last.Outcome)
	assert.Empty(t, c.Last.Reason)
}

// An unknown outcome the breaker does not know by name (for example the
// zero value) must be treated as Unknown too.
func TestCounts_Observe_unrecognisedOutcomeMovesNothing(t *testing.T) {
	c := Counts{Failures: 2, Last: failedResult(probe.ReasonTimeout)}
	c.Observe(probe.Result{})
	assert.Equal(t, 2, c.Failures)
	assert.Equal(t, 0, c.Successes)
	assert.Equal(t, probe.ReasonTimeout, c.Last.Reason)
}

func TestState_Inputs_holdOpen(t *testing.T) {
	key := func(i int) string { return fmt.Sprintf("Mutating/cfg/w%d.example.com", i) }
	cases := map[string]struct {
		hold    int
		results []probe.Result
		want    bool
	}{
		"two targets failing":                    {2, []probe.Result{failedResult(probe.ReasonTimeout), failedResult(probe.ReasonRefused)}, true},
		"one of them healthy":                    {2, []probe.Result{failedResult(probe.ReasonTimeout), healthyResult()}, false},
		"a single target never holds":            {2, []probe.Result{failedResult(probe.ReasonTimeout)}, false},
		"unknown results are not counted":        {2, []probe.Result{failedResult(probe.ReasonTimeout), {Outcome: probe.OutcomeUnknown}}, false},
		"two failing under a threshold of three": {3, []probe.Result{failedResult(probe.ReasonTimeout), failedResult(probe.ReasonRefused)}, false},
		"switched off":                           {0, []probe.Result{failedResult(probe.ReasonTimeout), failedResult(probe.ReasonRefused)}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := NewState()
			s.HoldWhenAllFail = tc.hold
			for i, r := range tc.results {
				s.Register(key(i))
				if r.Outcome != "" {
					s.Observe(key(i), r, testNow)
				}
			}
			assert.Equal(t, tc.want, s.Inputs(nil, testNow, "", "").HoldOpen)
		})
	}
}

func TestPlan_holdOpenStopsOpeningsNotClosings(t *testing.T) {
	base := newConfig(newWebhook(whA, policyFail), newWebhook(whB, policyFail))
	tgts := []config.Target{target(whA, config.ModeBypass, 1, 1), target(whB, config.ModeBypass, 1, 1)}
	cur := withEntries(t, base, circuit.Record{whB: entryFor(config.ModeBypass, policyFail)})
	_, changes := plan(t, cur, Inputs{Targets: tgts, HoldOpen: true, Counts: map[string]Counts{whA: failing(3, probe.ReasonTimeout), whB: healthy(3)}})
	assert.Equal(t, map[string]ChangeKind{whB: Closed}, kinds(changes))
}

func TestCounts_ExpireFailures(t *testing.T) {
	cases := map[string]struct {
		seq          string
		after        int
		wantFailures int
	}{
		"failures followed by fewer Unknowns still count":       {"FFU", 3, 2},
		"failures followed by openAfter Unknowns stop counting": {"FFUUU", 3, 0},
		"a failure after the Unknowns starts a new run":         {"FFUUUF", 3, 1},
		"0 keeps them however many Unknowns follow":             {"FFUUUUUU", 0, 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var c Counts
			for _, ch := range tc.seq {
				observeSeq(t, &c, string(ch))
				c.ExpireFailures(tc.after)
			}
			assert.Equal(t, tc.wantFailures, c.Failures)
		})
	}
}

func TestState_ObserveAPIServer_oldFailuresExpire(t *testing.T) {
	tgt := target(whA, config.ModeBypass, 3, 2)
	s := NewState()
	s.Configure([]config.Target{tgt})
	s.Register(tgt.Key())
	failed := probe.Result{Outcome: probe.OutcomeFailed, Reason: ReasonAPIServerCalls, Err: errors.New("calls failed")}
	s.ObserveAPIServer(tgt.Key(), failed, 0, 0, false)
	s.ObserveAPIServer(tgt.Key(), failed, 0, 0, false)
	for range 3 {
		s.ObserveAPIServer(tgt.Key(), unknownResult(), 0, 0, false)
	}
	st := s.ObserveAPIServer(tgt.Key(), failed, 0, 0, false)
	assert.Equal(t, 1, st.APIServer.Failures, "two failures %d scrapes old do not complete a run with a third", tgt.OpenAfter)

	s.ObserveAPIServer(tgt.Key(), failed, 0, 0, false)
	s.ObserveAPIServer(tgt.Key(), unknownResult(), 0, 0, false)
	st = s.ObserveAPIServer(tgt.Key(), failed, 0, 0, false)
	assert.Equal(t, 3, st.APIServer.Failures, "one Unknown between failures still counts them")
}
