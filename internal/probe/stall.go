package probe

import (
	"context"
	"sync"
	"time"
)

// StallMonitor notices when this process does not run: a goroutine wakes
// every Tick and records how much later than due it woke. A process whose
// CPU quota is spent (cgroup throttling), or that is starved or paused,
// wakes late, and so do its probes: a probe whose deadline passed while
// the guard itself was not running says nothing about the webhook.
type StallMonitor struct {
	// Tick is how often it wakes. Default defaultTick.
	Tick time.Duration
	// Min is the smallest lateness recorded as a stall. Default 30ms.
	Min time.Duration

	mu     sync.Mutex
	last   time.Time
	stalls []stall
}

type stall struct{ from, to time.Time }

// keepStalls is how long stalls are remembered: longer than any probe.
const keepStalls = 2 * time.Minute

func (m *StallMonitor) tick() time.Duration {
	if m.Tick > 0 {
		return m.Tick
	}
	return defaultTick
}

// defaultTick is how often a StallMonitor wakes by default: often enough
// to see a stall of a probe's scale (tens of milliseconds), rarely enough
// to cost nothing measurable.
const defaultTick = 20 * time.Millisecond

func (m *StallMonitor) min() time.Duration {
	if m.Min > 0 {
		return m.Min
	}
	return 30 * time.Millisecond
}

// Run wakes every Tick until ctx ends.
func (m *StallMonitor) Run(ctx context.Context) {
	t := time.NewTicker(m.tick())
	defer t.Stop()
	m.observe(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.observe(time.Now())
		}
	}
}

// observe records a wake-up at now.
func (m *StallMonitor) observe(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.last.IsZero() {
		if late := now.Sub(m.last) - m.tick(); late >= m.min() {
			m.stalls = append(m.stalls, stall{from: now.Add(-late), to: now})
		}
	}
	m.last = now
	for len(m.stalls) > 0 && now.Sub(m.stalls[0].to) > keepStalls {
		m.stalls = m.stalls[1:]
	}
}

// Stalled returns how long the process did not run between from and to,
// counting a stall still in progress (the monitor has not woken since).
func (m *StallMonitor) Stalled(from, to time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	spans := m.stalls
	if !m.last.IsZero() {
		if late := to.Sub(m.last) - m.tick(); late >= m.min() {
			spans = append(spans[:len(spans):len(spans)], stall{from: to.Add(-late), to: to})
		}
	}
	var total time.Duration
	for _, s := range spans {
		start, end := s.from, s.to
		if start.Before(from) {
			start = from
		}
		if end.After(to) {
			end = to
		}
		if end.After(start) {
			total += end.Sub(start)
		}
	}
	return total
}
