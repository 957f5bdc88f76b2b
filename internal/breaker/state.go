package breaker

import (
	"sync"
	"time"

	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// TargetStatus is what the leader knows about one target beyond the
// object: its probe counts and whether it could be probed at all.
type TargetStatus struct {
	Counts
	// LastProbe is when the last probe finished.
	LastProbe time.Time
	// Problem is why the target is not being probed (missing
	// configuration or webhook, unprobeable); empty when it is.
	Problem string
	// Diagnosis is the likely cause of the last TLS failure, if known.
	Diagnosis string
}

// State holds every target's TargetStatus, keyed by config.Target.Key.
// It is shared by the probe runner (writer) and the reconciler and the
// status endpoint (readers). It is memory only: after a failover the new
// leader starts counting from zero and reads the circuit from the objects.
type State struct {
	mu      sync.RWMutex
	targets map[string]TargetStatus
}

// NewState returns an empty State.
func NewState() *State { return &State{targets: map[string]TargetStatus{}} }

// Observe records a probe result for key and returns the new counts.
func (s *State) Observe(key string, r probe.Result, at time.Time) Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.targets[key]
	st.Observe(r)
	st.LastProbe = at
	st.Problem = ""
	s.targets[key] = st
	return st.Counts
}

// SetProblem records why key is not probed and reports whether that is
// news (so the caller emits an Event once, not every interval).
func (s *State) SetProblem(key, problem string) bool {
	return s.setNote(key, problem, func(st *TargetStatus) *string { return &st.Problem })
}

// SetDiagnosis records the likely cause of a TLS failure and reports
// whether it is news.
func (s *State) SetDiagnosis(key, diagnosis string) bool {
	return s.setNote(key, diagnosis, func(st *TargetStatus) *string { return &st.Diagnosis })
}

func (s *State) setNote(key, value string, field func(*TargetStatus) *string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.targets[key]
	f := field(&st)
	changed := *f != value
	*f = value
	s.targets[key] = st
	return changed
}

// Get returns key's status.
func (s *State) Get(key string) (TargetStatus, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.targets[key]
	return st, ok
}
