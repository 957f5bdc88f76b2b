package decide_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

func TestJudge_table(t *testing.T) {
	cases := map[string]struct {
		open                  bool
		failures, successes   int
		openAfter, closeAfter int
		want                  decide.Action
	}{
		"a closed circuit with no probes stays":                       {open: false, openAfter: 3, closeAfter: 5, want: decide.Stay},
		"a closed circuit below the failure threshold stays":          {open: false, failures: 2, openAfter: 3, closeAfter: 5, want: decide.Stay},
		"a closed circuit at the failure threshold opens":             {open: false, failures: 3, openAfter: 3, closeAfter: 5, want: decide.Open},
		"a closed circuit above the failure threshold opens":          {open: false, failures: 7, openAfter: 3, closeAfter: 5, want: decide.Open},
		"a closed circuit with successes stays closed":                {open: false, successes: 10, openAfter: 3, closeAfter: 5, want: decide.Stay},
		"an open circuit below the success threshold stays":           {open: true, successes: 4, openAfter: 3, closeAfter: 5, want: decide.Stay},
		"an open circuit at the success threshold closes":             {open: true, successes: 5, openAfter: 3, closeAfter: 5, want: decide.Close},
		"an open circuit above the success threshold closes":          {open: true, successes: 9, openAfter: 3, closeAfter: 5, want: decide.Close},
		"an open circuit with failures stays open":                    {open: true, failures: 10, openAfter: 3, closeAfter: 5, want: decide.Stay},
		"an open circuit with no probes stays":                        {open: true, openAfter: 3, closeAfter: 5, want: decide.Stay},
		"a closed circuit with threshold one opens after one failure": {open: false, failures: 1, openAfter: 1, closeAfter: 1, want: decide.Open},
		"a closed circuit with threshold one stays with no failure":   {open: false, successes: 1, openAfter: 1, closeAfter: 1, want: decide.Stay},
		"an open circuit with threshold one closes after one success": {open: true, successes: 1, openAfter: 1, closeAfter: 1, want: decide.Close},
		"an open circuit with threshold one stays with no success":    {open: true, failures: 1, openAfter: 1, closeAfter: 1, want: decide.Stay},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := decide.Counts{Failures: tc.failures, Successes: tc.successes}
			assert.Equal(t, tc.want, decide.Judge(tc.open, c, tc.openAfter, tc.closeAfter))
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
			var c decide.Counts
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
	cases := map[string]decide.Counts{
		"zero counts stay zero":                     {},
		"failures are not reset":                    {Failures: 2, Last: breakertest.FailedResult(probe.ReasonTLS)},
		"successes are not reset":                   {Successes: 4, Last: breakertest.HealthyResult()},
		"an earlier unknown is replaced by the new": {Failures: 1, Last: breakertest.FailedResult(probe.ReasonRefused), LastUnknown: &probe.Result{Outcome: probe.OutcomeUnknown}},
	}
	for name, before := range cases {
		t.Run(name, func(t *testing.T) {
			c := before
			u := breakertest.UnknownResult()
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
	var c decide.Counts
	c.Observe(breakertest.FailedResult(probe.ReasonRefused))
	c.Observe(breakertest.FailedResult(probe.ReasonTLS))
	assert.Equal(t, probe.ReasonTLS, c.Last.Reason, "Last is the most recent known result")
	assert.Nil(t, c.LastUnknown)

	u1 := breakertest.UnknownResult()
	c.Observe(u1)
	u2 := probe.Result{Outcome: probe.OutcomeUnknown, Err: errors.New("second unknown")}
	c.Observe(u2)
	assert.Equal(t, probe.ReasonTLS, c.Last.Reason, "unknowns do not replace Last")
	require.NotNil(t, c.LastUnknown)
	assert.Equal(t, "second unknown", c.LastUnknown.Err.Error(), "LastUnknown is the newest unknown")
	assert.Equal(t, 2, c.Failures)

	c.Observe(breakertest.FailedResult(probe.ReasonNoRoute))
	assert.Equal(t, 3, c.Failures)
	assert.Equal(t, probe.ReasonNoRoute, c.Last.Reason)
	assert.Nil(t, c.LastUnknown, "a known result clears LastUnknown")

	c.Observe(breakertest.HealthyResult())
	assert.Equal(t, 0, c.Failures)
	assert.Equal(t, 1, c.Successes)
	assert.Equal(t, probe.OutcomeHealthy, c.Last.Outcome)
	assert.Empty(t, c.Last.Reason)
}

// TestCounts_ObserveSince_aRunOfSlowFailures: Slow holds while every
// failure of the run was only slow, and FailingSince is when the run's
// first probe was sent; an Unknown continues the run, and both start over
// with the next run.
func TestCounts_ObserveSince_aRunOfSlowFailures(t *testing.T) {
	slow := breakertest.FailedResult(probe.ReasonTimeout)
	slow.Slow = true
	at := func(s int) time.Time { return breakertest.Now.Add(time.Duration(s) * time.Second) }
	var c decide.Counts
	c.ObserveSince(slow, at(0))
	c.ObserveSince(breakertest.UnknownResult(), at(1))
	c.ObserveSince(slow, at(2))
	assert.True(t, c.Slow)
	assert.Equal(t, at(0), c.FailingSince)

	c.ObserveSince(breakertest.FailedResult(probe.ReasonRefused), at(3))
	c.ObserveSince(slow, at(4))
	assert.False(t, c.Slow, "one failure that is not slow makes the run more than slow")
	assert.Equal(t, at(0), c.FailingSince)

	c.ObserveSince(breakertest.HealthyResult(), at(5))
	assert.Zero(t, c.FailingSince)
	c.ObserveSince(slow, at(6))
	assert.True(t, c.Slow, "a new run starts over")
	assert.Equal(t, at(6), c.FailingSince)

	c.Observe(slow)
	assert.Equal(t, at(6), c.FailingSince, "a result without its time continues the run")
	c.Failures = 0 // as State.Reset does after a transition
	c.Observe(slow)
	assert.Zero(t, c.FailingSince, "a run begun without its time has none")
}

// An unknown outcome the breaker does not know by name (for example the
// zero value) must be treated as Unknown too.
func TestCounts_Observe_unrecognisedOutcomeMovesNothing(t *testing.T) {
	c := decide.Counts{Failures: 2, Last: breakertest.FailedResult(probe.ReasonTimeout)}
	c.Observe(probe.Result{})
	assert.Equal(t, 2, c.Failures)
	assert.Equal(t, 0, c.Successes)
	assert.Equal(t, probe.ReasonTimeout, c.Last.Reason)
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
			var c decide.Counts
			for _, ch := range tc.seq {
				observeSeq(t, &c, string(ch))
				c.ExpireFailures(tc.after)
			}
			assert.Equal(t, tc.wantFailures, c.Failures)
		})
	}
}

func TestPlan_holdOpenStopsOpeningsNotClosings(t *testing.T) {
	base := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail), breakertest.Webhook(breakertest.WhB, breakertest.PolicyFail))
	tgts := []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 1, 1), breakertest.Target(breakertest.WhB, config.ModeBypass, 1, 1)}
	cur := breakertest.WithEntries(t, base, circuit.Record{breakertest.WhB: breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)})
	_, changes := breakertest.Plan(t, cur, decide.Inputs{Targets: tgts, HoldOpen: true, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(3, probe.ReasonTimeout)}, breakertest.WhB: {Probe: breakertest.Healthy(3)}}})
	assert.Equal(t, map[string]decide.ChangeKind{breakertest.WhB: decide.Closed}, breakertest.Kinds(changes))
}

// observeSeq feeds a sequence written as letters: H healthy, F failed
// (reason timeout), U unknown.
func observeSeq(t *testing.T, c *decide.Counts, seq string) {
	t.Helper()
	for _, ch := range seq {
		switch ch {
		case 'H':
			c.Observe(breakertest.HealthyResult())
		case 'F':
			c.Observe(breakertest.FailedResult(probe.ReasonTimeout))
		case 'U':
			c.Observe(breakertest.UnknownResult())
		default:
			t.Fatalf("bad sequence letter %q", ch)
		}
	}
}

func TestJudgeTarget(t *testing.T) {
	healthy, apiFailing := breakertest.Healthy, breakertest.APIServerFailing
	pathFailing, pathHealthy := breakertest.PathFailing, breakertest.PathHealthy
	timeouts := func(n int) decide.Counts { return breakertest.Failing(n, probe.ReasonTimeout) }
	unknownAfterFailing := apiFailing(2)
	unknownAfterFailing.Observe(probe.Result{Outcome: probe.OutcomeUnknown})
	// An open circuit's probe that failed, then could not run.
	probeUnknown := func(n int) decide.Counts {
		c := timeouts(3)
		for range n {
			c.Observe(probe.Result{Outcome: probe.OutcomeUnknown})
		}
		return c
	}
	pathUnknown := decide.Path{Road: decide.RoadService}
	pathUnknown.Observe(probe.Result{Outcome: probe.OutcomeUnknown, Err: errors.New("forbidden")})
	url := decide.Path{Road: decide.RoadURL}
	urlShared := decide.Path{Road: decide.RoadURL, SharedWith: "istio-revision-canary"}
	byAPIServer := circuit.Entry{Signal: decide.SignalAPIServer}
	byBoth := circuit.Entry{Signal: decide.SignalBoth}
	byProbe := circuit.Entry{Signal: decide.SignalProbe}
	byRoad := circuit.Entry{Signal: decide.SignalRoad}
	// A run of probes that gave up at their own timeout, below the
	// webhook's timeoutSeconds (slow), or at timeoutSeconds (hangs), one a
	// second from t0; the apiserver's last observation saw the webhook's
	// calls made, none failed, in a window from since.
	t0 := breakertest.Now
	run := func(n int, slowOnly bool) decide.Counts {
		var c decide.Counts
		for i := range n {
			r := breakertest.FailedResult(probe.ReasonTimeout)
			r.Slow = slowOnly
			c.ObserveSince(r, t0.Add(time.Duration(i)*time.Second))
		}
		return c
	}
	slow := func(n int) decide.Counts { return run(n, true) }
	hangs := func(n int) decide.Counts { return run(n, false) }
	slowThenRefused := slow(2)
	slowThenRefused.ObserveSince(breakertest.FailedResult(probe.ReasonRefused), t0.Add(2*time.Second))
	callsSince := func(since time.Time) decide.Counts {
		c := healthy(1)
		c.SucceedingSince = since
		return c
	}
	callsThenUnknown := callsSince(t0.Add(time.Second))
	callsThenUnknown.Observe(probe.Result{Outcome: probe.OutcomeUnknown, Err: errors.New("no calls")})
	ignore, bypass := config.ModeIgnore, config.ModeBypass
	opens, closes, stays := decide.Open, decide.Close, decide.Stay
	sAPI, sBoth, sProbe := decide.SignalAPIServer, decide.SignalBoth, decide.SignalProbe
	sRoad, sPath := decide.SignalRoad, decide.SignalPath
	cases := map[string]struct {
		open       bool
		entry      circuit.Entry
		probe, api decide.Counts
		path       decide.Path
		mode       config.Mode
		disabled   bool
		alone      bool // withoutPathProbe: Open
		want       decide.Action
		wantSignal string
	}{
		"the probe alone opens": {
			probe: timeouts(3), api: healthy(5), want: opens, wantSignal: sProbe},
		"the apiserver opens when the path probe confirms a broken road": {
			probe: healthy(9), api: apiFailing(3), path: pathFailing(3), want: opens, wantSignal: sAPI},
		"both at once open once, named both": {
			probe: timeouts(3), api: apiFailing(3), path: pathFailing(3), want: opens, wantSignal: sBoth},
		"the probe and unconfirmed apiserver failures: the probe's opening": {
			probe: timeouts(3), api: apiFailing(3), path: pathHealthy(3), want: opens, wantSignal: sProbe},
		"a tenant's failing requests open nothing: the road works": {
			probe: healthy(9), api: apiFailing(30), path: pathHealthy(30), want: stays},
		"the road not yet confirmed for openAfter probes opens nothing": {
			probe: healthy(9), api: apiFailing(3), path: pathFailing(2), want: stays},
		"a path probe that cannot run opens nothing": {
			probe: healthy(9), api: apiFailing(9), path: pathUnknown, want: stays},
		"a road not read yet opens nothing": {
			probe: healthy(9), api: apiFailing(9), want: stays},
		"a url webhook's failing calls open nothing by default": {
			probe: healthy(9), api: apiFailing(9), path: url, want: stays},
		"a url webhook's failing calls open alone under withoutPathProbe: Open": {
			probe: healthy(9), api: apiFailing(3), path: url, alone: true, want: opens, wantSignal: sAPI},
		"a url webhook whose name another configuration shares opens nothing, even so": {
			probe: healthy(9), api: apiFailing(9), path: urlShared, alone: true, want: stays},
		"a disabled apiserver signal opens nothing": {
			probe: healthy(9), api: apiFailing(9), path: pathFailing(9), disabled: true, want: stays},
		"too few failing intervals open nothing": {
			probe: timeouts(2), api: apiFailing(2), path: pathFailing(2), want: stays},
		"a broken road opens alone while the direct probe is healthy": {
			probe: healthy(9), path: pathFailing(3), want: opens, wantSignal: sRoad},
		"a broken road opens alone before any apiserver observation": {
			path: pathFailing(3), want: opens, wantSignal: sRoad},
		"a road broken only openAfter-1 times opens nothing": {
			probe: healthy(9), api: apiFailing(1), path: pathFailing(2), want: stays},
		"a tenant's failing calls on a working road keep it closed": {
			probe: healthy(9), api: apiFailing(3), path: pathHealthy(1), want: stays},
		"a broken road opens nothing when the apiserver signal is disabled": {
			probe: healthy(9), path: pathFailing(9), disabled: true, want: stays},
		"a url road has no path probe to open alone": {
			probe: healthy(9), path: url, want: stays},

		"slow probes open nothing while the apiserver's calls succeed in a window since the first": {
			probe: slow(3), api: callsSince(t0.Add(time.Second)), want: stays},
		"slow probes open nothing while the calls succeed in a window from the first one's sending": {
			probe: slow(3), api: callsSince(t0), want: stays},
		"slow probes open once the apiserver sees no calls (Unknown)": {
			probe: slow(3), api: callsThenUnknown, want: opens, wantSignal: sProbe},
		"slow probes open while the apiserver's calls fail": {
			probe: slow(3), api: apiFailing(1), want: opens, wantSignal: sProbe},
		"slow probes open when a call failed in the window, below failureRatio": {
			probe: slow(3), api: healthy(1), want: opens, wantSignal: sProbe},
		"slow probes open when the calls succeeded before the first slow probe": {
			probe: slow(3), api: callsSince(t0.Add(-time.Second)), want: opens, wantSignal: sProbe},
		"slow probes open when the apiserver signal is disabled": {
			probe: slow(3), api: callsSince(t0.Add(time.Second)), disabled: true, want: opens, wantSignal: sProbe},
		"a run with one failure that is not slow opens, whatever the calls": {
			probe: slowThenRefused, api: callsSince(t0.Add(time.Second)), want: opens, wantSignal: sProbe},
		"timeouts at timeoutSeconds open, whatever the calls": {
			probe: hangs(3), api: callsSince(t0.Add(time.Second)), want: opens, wantSignal: sProbe},

		"Bypass closes on the probe alone (no traffic while open)": {
			open: true, entry: byProbe, mode: bypass, probe: healthy(2), api: apiFailing(4), want: closes},
		"Ignore closes while a tenant's calls fail: the road works": {
			open: true, entry: byProbe, mode: ignore, probe: healthy(9), api: apiFailing(1), path: pathHealthy(1), want: closes},
		"Ignore closes while calls fail and no path probe can tell": {
			open: true, entry: byProbe, mode: ignore, probe: healthy(9), api: apiFailing(1), path: pathUnknown, want: closes},
		"no Fail goes back while the path probe fails (Ignore)": {
			open: true, entry: byProbe, mode: ignore, probe: healthy(9), api: apiFailing(1), path: pathFailing(1), want: stays},
		"no Fail goes back while the path probe fails (Bypass)": {
			open: true, entry: byProbe, mode: bypass, probe: healthy(9), path: pathFailing(1), want: stays},
		"Ignore on a url road under withoutPathProbe: Open waits for the apiserver's calls": {
			open: true, entry: byProbe, mode: ignore, probe: healthy(9), api: apiFailing(1), path: url, alone: true,
			want: stays},
		"Ignore on a url road closes once the apiserver's calls stop (Unknown)": {
			open: true, entry: byProbe, mode: ignore, probe: healthy(2), api: unknownAfterFailing, path: url, alone: true,
			want: closes},
		"Ignore on a url road under Report does not wait for the apiserver's calls": {
			open: true, entry: byProbe, mode: ignore, probe: healthy(2), api: apiFailing(1), path: url, want: closes},
		"Ignore closes once the apiserver's calls succeed": {
			open: true, entry: byProbe, mode: ignore, probe: healthy(2), api: healthy(1), want: closes},
		"Ignore ignores the apiserver when the signal is disabled": {
			open: true, entry: byProbe, mode: ignore, probe: healthy(2), api: apiFailing(1), path: pathFailing(3),
			disabled: true,
			want:     closes},
		"an open circuit never closes on the apiserver signal only": {
			open: true, entry: byProbe, mode: ignore, probe: healthy(1), api: healthy(9), want: stays},

		"a circuit the road opened closes on closeAfter healthy path probes": {
			open: true, entry: byAPIServer, mode: bypass, probe: healthy(1), path: pathHealthy(2),
			want: closes, wantSignal: sPath},
		"a circuit the road opened stays while the path probe fails, however healthy the probe": {
			open: true, entry: byAPIServer, mode: bypass, probe: healthy(99), path: pathFailing(1), want: stays},
		"a circuit the road opened waits for closeAfter path probes": {
			open: true, entry: byAPIServer, mode: bypass, probe: healthy(99), path: pathHealthy(1), want: stays},
		"a circuit the road opened stays while the direct probe fails": {
			open: true, entry: byAPIServer, mode: ignore, probe: timeouts(1), path: pathHealthy(9), want: stays},
		"a circuit the road opened stays while the path probe cannot run": {
			open: true, entry: byAPIServer, mode: bypass, probe: healthy(9), path: pathUnknown, want: stays},
		"a circuit the road opened ignores a tenant's failing calls (Ignore)": {
			open: true, entry: byAPIServer, mode: ignore, probe: healthy(9), api: apiFailing(9), path: pathHealthy(2),
			want: closes, wantSignal: sPath},
		"a circuit both opened needs both probes healthy": {
			open: true, entry: byBoth, mode: bypass, probe: healthy(1), path: pathHealthy(9), want: stays},
		"a circuit both opened closes when both are healthy": {
			open: true, entry: byBoth, mode: bypass, probe: healthy(2), path: pathHealthy(2), want: closes, wantSignal: sPath},
		"a circuit the apiserver opened on a url road closes on the probe": {
			open: true, entry: byAPIServer, mode: bypass, probe: healthy(2), path: url, alone: true, want: closes},
		"a circuit the road alone opened closes on closeAfter healthy path probes": {
			open: true, entry: byRoad, mode: bypass, probe: healthy(1), path: pathHealthy(2), want: closes, wantSignal: sPath},
		"a circuit the road alone opened waits for closeAfter healthy path probes": {
			open: true, entry: byRoad, mode: ignore, probe: healthy(99), path: pathHealthy(1), want: stays},
		"a circuit the road alone opened stays while the road is broken": {
			open: true, entry: byRoad, mode: ignore, probe: healthy(99), path: pathFailing(1), want: stays},

		"a probe Unknown for closeAfter intervals closes when the apiserver's calls succeed": {
			open: true, entry: byProbe, mode: ignore, probe: probeUnknown(2), api: healthy(2), want: closes, wantSignal: sAPI},
		"a probe Unknown for closeAfter intervals holds while the apiserver's calls fail": {
			open: true, entry: byProbe, mode: ignore, probe: probeUnknown(2), api: apiFailing(5), want: stays},
		"a probe Unknown for closeAfter intervals holds without apiserver traffic (Bypass)": {
			open: true, entry: byProbe, mode: bypass, probe: probeUnknown(5), api: unknownAfterFailing, want: stays},
		"a probe Unknown for fewer than closeAfter intervals waits": {
			open: true, entry: byProbe, mode: ignore, probe: probeUnknown(1), api: healthy(9), want: stays},
		"a probe Unknown holds when the apiserver signal is disabled": {
			open: true, entry: byProbe, mode: ignore, probe: probeUnknown(9), api: healthy(9), disabled: true, want: stays},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, tc.mode, 3, 2))
			tgt.APIServerSignal.Enabled = !tc.disabled
			if tc.alone {
				tgt.APIServerSignal.WithoutPathProbe = config.WithoutPathProbeOpen
			}
			action, signal := decide.JudgeTarget(tc.open, tc.entry, tc.probe, tc.api, tc.path, tgt)
			assert.Equal(t, tc.want, action)
			assert.Equal(t, tc.wantSignal, signal)
		})
	}
}
