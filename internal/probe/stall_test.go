package probe

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStallMonitor_recordsHowLongTheProcessDidNotRun(t *testing.T) {
	m := &StallMonitor{Tick: 20 * time.Millisecond, Min: 30 * time.Millisecond}
	t0 := time.Unix(1000, 0)
	m.observe(t0)
	m.observe(t0.Add(20 * time.Millisecond))  // on time
	m.observe(t0.Add(45 * time.Millisecond))  // 5 ms late: noise
	m.observe(t0.Add(565 * time.Millisecond)) // 500 ms late: a stall from 65 ms to 565 ms
	assert.Equal(t, 500*time.Millisecond, m.Stalled(t0, t0.Add(600*time.Millisecond)))
	assert.Equal(t, 100*time.Millisecond, m.Stalled(t0.Add(465*time.Millisecond), t0.Add(600*time.Millisecond)), "only the overlap counts")
	assert.Zero(t, m.Stalled(t0.Add(570*time.Millisecond), t0.Add(580*time.Millisecond)))
	// A stall still in progress: the monitor has not woken since 565 ms.
	assert.Equal(t, 400*time.Millisecond, m.Stalled(t0.Add(570*time.Millisecond), t0.Add(985*time.Millisecond)))
	m.observe(t0.Add(3 * time.Minute))
	assert.Len(t, m.stalls, 1, "stalls older than any probe are forgotten")
}

type fixedStalls time.Duration

func (f fixedStalls) Stalled(time.Time, time.Time) time.Duration { return time.Duration(f) }

// A probe that timed out while the guard itself was not running is
// Unknown: it moves no counter, so an overloaded guard opens nothing.
func TestProbe_aTimeoutWhileTheGuardStalledIsUnknown(t *testing.T) {
	wh, _ := localWebhook(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	spec := Spec{Timeout: 200 * time.Millisecond}
	for name, tc := range map[string]struct {
		stalled time.Duration
		want    Outcome
	}{
		"stalled for half the timeout":           {stalled: 100 * time.Millisecond, want: OutcomeUnknown},
		"stalled for a tenth of the timeout":     {stalled: 20 * time.Millisecond, want: OutcomeUnknown},
		"stalled for a twentieth":                {stalled: 10 * time.Millisecond, want: OutcomeUnknown},
		"a few milliseconds of scheduling noise": {stalled: 5 * time.Millisecond, want: OutcomeFailed},
	} {
		t.Run(name, func(t *testing.T) {
			p := &Prober{Discovery: testDiscovery(), Stalls: fixedStalls(tc.stalled)}
			res := p.Probe(context.Background(), wh, spec)
			require.Equal(t, tc.want, res.Outcome, "%v", res.Err)
			if tc.want == OutcomeUnknown {
				assert.Contains(t, res.Err.Error(), "webhook-guard itself did not run")
			} else {
				assert.Equal(t, ReasonTimeout, res.Reason)
			}
		})
	}
}

// Only a stall at the probe's deadline discounts its timeout. A guard at
// its CPU limit is stalled for tens of milliseconds in many CFS periods,
// so nearly every probe window holds some stall; a hanging webhook's
// timeouts must still count, or its circuit never opens. An answer that
// arrives during an earlier stall is read before the deadline.
func TestProbe_onlyAStallAtTheDeadlineDiscountsATimeout(t *testing.T) {
	wh, _ := localWebhook(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	const timeout = 300 * time.Millisecond
	for name, tc := range map[string]struct {
		// from and to place the stall after the probe is sent.
		from, to time.Duration
		want     Outcome
	}{
		"a stall of a third of the timeout, early in the probe": {from: 20 * time.Millisecond, to: 120 * time.Millisecond, want: OutcomeFailed},
		"a stall of a third, in the middle":                     {from: 100 * time.Millisecond, to: 200 * time.Millisecond, want: OutcomeFailed},
		"a stall across the deadline":                           {from: 250 * time.Millisecond, to: 400 * time.Millisecond, want: OutcomeUnknown},
		"a stall after the deadline, while the probe returns":   {from: 305 * time.Millisecond, to: 600 * time.Millisecond, want: OutcomeFailed},
		"a stall from the start past the deadline":              {from: 0, to: 350 * time.Millisecond, want: OutcomeUnknown},
	} {
		t.Run(name, func(t *testing.T) {
			m := &StallMonitor{}
			sent := time.Now()
			m.stalls = []stall{{from: sent.Add(tc.from), to: sent.Add(tc.to)}}
			m.last = sent.Add(time.Hour) // no stall in progress beyond the one placed
			p := &Prober{Discovery: testDiscovery(), Stalls: m}
			res := p.Probe(context.Background(), wh, Spec{Timeout: timeout})
			require.Equal(t, tc.want, res.Outcome, "%v", res.Err)
			if tc.want == OutcomeFailed {
				assert.Equal(t, ReasonTimeout, res.Reason)
			}
		})
	}
}

func TestStallMonitor_Run_noticesARealStall(t *testing.T) {
	m := &StallMonitor{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx)
	time.Sleep(50 * time.Millisecond)
	// Hold the monitor's lock as a stand-in for a paused process: its
	// goroutine cannot record the tick until it is released.
	m.mu.Lock()
	time.Sleep(300 * time.Millisecond)
	m.mu.Unlock()
	from := time.Now().Add(-400 * time.Millisecond)
	require.Eventually(t, func() bool { return m.Stalled(from, time.Now()) >= 200*time.Millisecond }, 2*time.Second, 10*time.Millisecond)
}
