package breaker

import (
	"strconv"
	"sync"
	"time"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// TargetStatus is what the leader knows about one target beyond the
// object: its probe counts and whether it could be probed at all.
type TargetStatus struct {
	// Counts are the direct probe's.
	decide.Counts
	// APIServer are the apiserver signal's counts: one observation per
	// scrape of kube-apiserver's /metrics.
	APIServer decide.Counts
	// Path is the path probe's evidence: one probe through kube-apiserver's
	// service proxy per interval while PathProbeNeeded.
	Path decide.Path
	// Admitted is how many requests the apiserver admitted without the
	// webhook since its circuit opened (apiserver signal; memory only).
	Admitted float64
	// Marked is how many objects its marking policy marked since its
	// circuit opened (the apiserver's own count; memory only).
	Marked float64
	// Disagree names the signal that fails while the other is healthy
	// ("apiserver" or "probe"), and DisagreeFor for how many apiserver
	// observations in a row; empty when they agree.
	Disagree    string
	DisagreeFor int
	// APIServerOpenings counts the apiserver signal's openings since its
	// last Healthy observation; each doubles the next minimum open time.
	APIServerOpenings int
	// Reopenings counts the circuit's re-openings in a row, each within
	// FlapWindow of its last close (flap damping: Damp); ClosedAt is when
	// the breaker last closed it.
	Reopenings int
	ClosedAt   time.Time
	// LastProbe is when the last probe finished.
	LastProbe time.Time
	// DecidedAt is when the last probe that said Healthy or Failed
	// finished (Last); an Unknown leaves it. The all-fail hold counts a
	// result as fresh from it, not from LastProbe: a probe that could not
	// run says nothing of the webhook, so it keeps no older result fresh.
	DecidedAt time.Time
	// TrafficAt is when the last scrape of the apiserver's metrics showed
	// the webhook called, every call healthy; zero when it did not
	// (traffic as the probe, see ObserveTraffic).
	TrafficAt time.Time
	// Backend is what serves the webhook: its Service and port, or its
	// URL's host (Backend); the hold counts webhooks on one as one.
	Backend string
	// Problem is why the target is not being probed (missing
	// configuration or webhook, unprobeable, handed over); empty when it is.
	Problem string
	// Unprobeable is set when the target exists but cannot be probed
	// safely; Plan closes an open circuit on it.
	Unprobeable bool
	// Observed is, for a target in Observe mode, what the breaker would
	// have done (State.JudgeObserved); zero for the others.
	Observed
}

// State holds every target's TargetStatus, keyed by config.Target.Key.
// It is shared by the probe runner (writer) and the reconciler and the
// status endpoint (readers). It is memory only: after a failover the new
// leader starts counting from zero and reads the circuit from the objects.
type State struct {
	// HoldWhenAllFail is config.Configuration.HoldWhenAllFail; 0 is off.
	HoldWhenAllFail int

	mu      sync.RWMutex
	targets map[string]TargetStatus
	// known holds what the hold needs of each target, by key (Configure).
	known map[string]targetFacts
	// holdBound is the longest a hold may keep an opening back; 0 is no
	// bound (Configure sets it).
	holdBound time.Duration
	// holdSince is when the current all-fail episode first kept back a
	// target at its threshold; zero when none has. Only a fresh healthy
	// result ends an episode (HoldOpen), so its bound runs once.
	holdSince time.Time
	// refused holds, by target key, the generation of the object at which
	// the apiserver refused the target's transition as invalid.
	refused map[string]string

	// verdictMu guards verdict, which allFailingLocked fills under mu held
	// for reading too.
	verdictMu sync.Mutex
	// verdict is allFailingLocked's last judgement, and when it was made:
	// every probe result asks for it, and it scans every target. A result
	// that leaves it as it is (a target failing past its threshold fails
	// again) keeps it; any other change of what it reads drops it
	// (verdictChanged), and it is judged again at least every
	// verdictRecheck, as results go stale with time.
	verdict allFailing
	// scans counts the judgements made, for tests.
	scans int
}

// allFailing is one judgement of allFailingLocked.
type allFailing struct {
	at                          time.Time
	valid                       bool
	all, atThreshold, recovered bool
}

// verdictRecheck is how long an all-fail judgement stands without a change
// that drops it: results go stale (HoldFreshFor) no faster than this
// matters, as the shortest probe interval is 100 ms.
const verdictRecheck = 50 * time.Millisecond

// verdictChanged drops the all-fail judgement; mu is held for writing.
func (s *State) verdictChanged() {
	s.verdictMu.Lock()
	s.verdict.valid = false
	s.verdictMu.Unlock()
}

// NewState returns an empty State.
func NewState() *State {
	return &State{targets: map[string]TargetStatus{}, refused: map[string]string{}}
}

// Refuse records that the apiserver refused key's transition on the
// object at generation (Generation, which changes with the webhooks and
// not with annotations, so the breaker's own arming writes leave it).
// Until the webhooks change the target is left as it is, so the refusal
// is not retried on every probe.
func (s *State) Refuse(key, generation string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused[key] = generation
}

// Generation is the state's text for an object's metadata.generation.
func Generation(obj interface{ GetGeneration() int64 }) string {
	return strconv.FormatInt(obj.GetGeneration(), 10)
}

// Observe records a probe result for key, which finished at at, and
// returns the new counts.
func (s *State) Observe(key string, r probe.Result, at time.Time) decide.Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.targets[key]
	if !s.failsAgainLocked(key, st, r, at) {
		s.verdictChanged()
	}
	st.ObserveSince(r, at.Add(-r.Duration))
	st.LastProbe = at
	if r.Outcome == probe.OutcomeHealthy || r.Outcome == probe.OutcomeFailed {
		st.DecidedAt = at
	}
	st.Problem, st.Unprobeable = "", false
	s.targets[key] = st
	return st.Counts
}

// failsAgainLocked reports whether result r of key, at at, leaves every
// fact the all-fail judgement reads of it as it was: key was probed, its
// fresh last result failed, past its threshold, and r fails again.
func (s *State) failsAgainLocked(key string, st TargetStatus, r probe.Result, at time.Time) bool {
	facts := s.known[key]
	return r.Outcome == probe.OutcomeFailed && st.Last.Outcome == probe.OutcomeFailed && st.Problem == "" &&
		st.Failures >= max(facts.openAfter, 1) && facts.interval > 0 && at.Sub(st.DecidedAt) <= HoldFreshFor*facts.interval
}

// SetProblem records why key is not probed, with its counts reset, and
// reports whether that is news (so the caller emits an Event once, not
// every interval). unprobeable says the target exists but cannot be probed.
func (s *State) SetProblem(key, problem string, unprobeable bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verdictChanged()
	st := s.targets[key]
	changed := st.Problem != problem
	st.Problem, st.Unprobeable = problem, unprobeable
	st.Failures, st.Successes = 0, 0
	st.APIServer.Failures, st.APIServer.Successes = 0, 0
	st.Path.Counts = decide.Counts{}
	s.targets[key] = st
	return changed
}

// ObservePath records a path probe result for key, about road, and
// returns the new evidence. shared is Path.SharedWith.
func (s *State) ObservePath(key string, road decide.Road, shared string, r probe.Result) decide.Path {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.targets[key]
	st.Path.Road, st.Path.SharedWith = road, shared
	st.Path.Observe(r)
	s.targets[key] = st
	return st.Path
}

// SetRoad records key's road and whether another configuration shares its
// webhook's name, and, when the path probe is not needed (run false),
// zeroes its counts: they would be stale when it is needed again. The
// last results stay, for status.
func (s *State) SetRoad(key string, road decide.Road, shared string, run bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.targets[key]
	st.Path.Road, st.Path.SharedWith = road, shared
	if !run {
		st.Path.Failures, st.Path.Successes, st.Path.Unknowns, st.Path.LastUnknown = 0, 0, 0, nil
	}
	s.targets[key] = st
}

// ObserveAPIServer records an apiserver signal observation for key (an
// Unknown moves no counter, but openAfter Unknowns in a row forget the
// failures before them: Counts.ExpireFailures) and its SucceedingSince,
// adds the requests admitted without the webhook while its circuit is
// open, and tracks whether the two signals disagree. It returns the new
// status.
func (s *State) ObserveAPIServer(key string, r probe.Result, succeedingSince time.Time, admitted, marked float64, open bool) TargetStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.targets[key]
	st.APIServer.Observe(r)
	st.APIServer.SucceedingSince = succeedingSince
	st.APIServer.ExpireFailures(s.known[key].openAfter)
	if r.Outcome == probe.OutcomeHealthy {
		st.APIServerOpenings = 0
	}
	if open {
		st.Admitted += admitted
		st.Marked += marked
	}
	if r.Outcome != probe.OutcomeUnknown {
		side := disagreement(st.Counts, r.Outcome)
		if side != st.Disagree {
			st.Disagree, st.DisagreeFor = side, 0
		}
		if side != "" {
			st.DisagreeFor++
		}
	}
	s.targets[key] = st
	return st
}

// AddAdmitted adds to key's count of requests admitted without the webhook
// while its circuit is open, and of objects marked meanwhile.
func (s *State) AddAdmitted(key string, admitted, marked float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.targets[key]
	st.Admitted += admitted
	st.Marked += marked
	s.targets[key] = st
}

// NoteOpening records that the breaker opened t's circuit on signal at
// now: a re-opening soon after its last close (Reopenings), and an
// opening by the apiserver signal.
func (s *State) NoteOpening(t config.Target, signal string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.targets[t.Key()]
	st.Reopenings = decide.Reopenings(t, st.Reopenings, st.ClosedAt, now)
	if signal == decide.SignalAPIServer || signal == decide.SignalBoth {
		st.APIServerOpenings++
	}
	s.targets[t.Key()] = st
}

// NoteClosing records that the breaker closed key's circuit at now.
func (s *State) NoteClosing(key string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.targets[key]
	st.ClosedAt = now
	s.targets[key] = st
}

// disagreement names the failing signal when the probe's last result and
// the apiserver's observation disagree.
func disagreement(probeCounts decide.Counts, apiserver probe.Outcome) string {
	switch {
	case probeCounts.Last.Outcome == probe.OutcomeHealthy && apiserver == probe.OutcomeFailed:
		return decide.SignalAPIServer
	case probeCounts.Last.Outcome == probe.OutcomeFailed && apiserver == probe.OutcomeHealthy:
		return decide.SignalProbe
	}
	return ""
}

// Reset zeroes key's consecutive counts of both signals and the admitted
// count (the last results stay, for status): after every transition the
// breaker wrote, so that the next decision rests only on what happened
// since.
func (s *State) Reset(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verdictChanged()
	st := s.targets[key]
	st.Failures, st.Successes = 0, 0
	st.APIServer.Failures, st.APIServer.Successes = 0, 0
	st.Path.Failures, st.Path.Successes = 0, 0
	st.Admitted, st.Marked = 0, 0
	s.targets[key] = st
}

// JudgeObserved judges t, a target in Observe mode, from its counts
// (JudgeObserved, with the hold), and applies the transition it would
// have made, if any, to its Observed state at now: it returns the Change
// to report, and true when there is one. As after a written transition,
// the counts of both signals start again from zero. An unprobeable target
// whose circuit would be open would close (as Plan closes an open one).
// Deciding and applying under one lock, the probe loop and the apiserver
// signal's loop never report one transition twice.
func (s *State) JudgeObserved(t config.Target, now time.Time) (decide.Change, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.targets[t.Key()]
	if !ok {
		return decide.Change{}, false
	}
	var action decide.Action
	var signal string
	switch {
	case st.Unprobeable:
		if st.WouldBeOpen() {
			action = decide.Close
		}
	case st.Problem != "":
	default:
		action, signal = decide.JudgeObserved(st.WouldBeOpen(), st.WouldOpenSignal, st.Counts, st.APIServer, st.Path, t, s.heldLocked(now))
	}
	if action == decide.Close && !st.Unprobeable && now.Sub(st.WouldOpenSince) < decide.Damp(t, st.WouldReopenings) {
		return decide.Change{}, false // flap damping, as for a written circuit
	}
	if action != decide.Open && action != decide.Close {
		return decide.Change{}, false
	}
	c := observedChange(t, st, action, signal, now)
	if action == decide.Open {
		st.WouldOpenSince, st.WouldOpenSignal = now, signal
		st.WouldReopenings = decide.Reopenings(t, st.WouldReopenings, st.WouldClosedAt, now)
	} else {
		st.WouldOpenSince, st.WouldOpenSignal, st.WouldClosedAt = time.Time{}, "", now
	}
	st.Failures, st.Successes = 0, 0
	st.APIServer.Failures, st.APIServer.Successes = 0, 0
	st.Path.Failures, st.Path.Successes = 0, 0
	s.targets[t.Key()] = st
	return c, true
}

// Get returns key's status.
func (s *State) Get(key string) (TargetStatus, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.targets[key]
	return st, ok
}

// Inputs returns what Plan decides from for one configuration's targets,
// on the object at generation (see Refuse): the counts of every target
// that is being probed and whose transition was not refused at that
// generation, stamped now, for the signer.
func (s *State) Inputs(targets []config.Target, now time.Time, signer, generation string) decide.Inputs {
	in := decide.Inputs{Targets: targets, Evidence: map[string]decide.Evidence{}, Now: now, Signer: signer}
	s.mu.RLock()
	defer s.mu.RUnlock()
	in.HoldOpen = s.heldLocked(now)
	for _, t := range targets {
		st, ok := s.targets[t.Key()]
		switch {
		case !ok, s.refused[t.Key()] == generation:
		case st.Unprobeable:
			in.Evidence[t.Webhook] = decide.Evidence{Unprobeable: st.Problem}
		case st.Problem == "":
			ev := decide.Evidence{Probe: st.Counts, APIServer: st.APIServer, Path: st.Path, Admitted: st.Admitted, Marked: st.Marked,
				Damp: decide.Damp(t, st.Reopenings)}
			if st.Path.Road != decide.RoadService {
				// Only a circuit no path probe can close waits out a
				// minimum: the path probe closes the others.
				ev.MinOpen = minOpen(t.APIServerSignal.MinOpen, st.APIServerOpenings)
			}
			in.Evidence[t.Webhook] = ev
		}
	}
	return in
}

// Register adds a target that has not been probed yet, so that the hold
// counts it as not healthy until its first result.
func (s *State) Register(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verdictChanged()
	if _, ok := s.targets[key]; !ok {
		s.targets[key] = TargetStatus{}
	}
}

// targetFacts are what the hold needs to know of a target besides its
// status.
type targetFacts struct {
	interval  time.Duration
	openAfter int
}

// HoldFreshFor is how many probe intervals a probe result counts for in
// the hold: an older one (a target traffic stands in for, or one whose
// probes stopped) says nothing about the guard's network now.
const HoldFreshFor = 3

// HoldBoundIntervals is how many probe intervals (of the slowest target)
// a hold may keep an opening back, from when it first kept back a target
// at its threshold, until a probe finds a target healthy again. A circuit
// left closed on a broken webhook refuses every request, so the suspicion
// that the guard's own network is to blame gives way after this, once per
// episode: results that go stale, or probes that cannot run, while every
// target fails do not start the bound again.
const HoldBoundIntervals = 3

// Configure tells the hold each target's interval and threshold, and so
// its bound (HoldBoundIntervals of the longest interval). Without it every
// result is fresh and a hold has no bound.
func (s *State) Configure(targets []config.Target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verdictChanged()
	s.known = make(map[string]targetFacts, len(targets))
	s.holdBound = 0
	for _, t := range targets {
		s.known[t.Key()] = targetFacts{interval: t.Probe.Interval, openAfter: t.OpenAfter}
		s.holdBound = max(s.holdBound, HoldBoundIntervals*t.Probe.Interval)
	}
}

// SetBackend records what serves key's webhook (Backend), so that the
// hold counts webhooks that share one as one.
func (s *State) SetBackend(key, backend string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.targets[key]
	if st.Backend != backend {
		s.verdictChanged()
		st.Backend = backend
		s.targets[key] = st
	}
}

// HoldOpen updates the hold at now and reports whether openings are held
// (Inputs.HoldOpen), and whether a hold ran out its bound (expired): the
// openings it kept back go now. The episode, and with it the bound, ends
// only when a fresh result is healthy: while no target is, a hold that
// lapses for want of fresh results (a starved guard's probes say Unknown,
// or are not sent) and comes back does not start its bound again.
func (s *State) HoldOpen(now time.Time) (held, expired bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all, atThreshold, recovered := s.allFailingLocked(now)
	switch {
	case recovered:
		s.holdSince = time.Time{}
	case all && atThreshold && s.holdSince.IsZero():
		s.holdSince = now
	}
	held = all && s.withinBoundLocked(now)
	return held, all && !held
}

// heldLocked reports whether openings are held at now: everything fails
// at once (allFailingLocked), and the hold has not run out its bound.
func (s *State) heldLocked(now time.Time) bool {
	all, _, _ := s.allFailingLocked(now)
	return all && s.withinBoundLocked(now)
}

// withinBoundLocked reports whether a hold at now is within its bound.
func (s *State) withinBoundLocked(now time.Time) bool {
	return s.holdBound == 0 || s.holdSince.IsZero() || now.Sub(s.holdSince) < s.holdBound
}

// allFailingLocked reports whether everything fails at once: counting the
// webhooks that share a backend as one, at least one backend is failing,
// at least HoldWhenAllFail are failing or not yet probed, and none is
// healthy. Only fresh results count (HoldFreshFor, from DecidedAt);
// targets that cannot be probed, and those whose probes could only say
// Unknown, do not count. atThreshold says a failing target has reached its
// openAfter: the hold keeps an opening back. recovered says a fresh result
// is healthy: the episode is over.
func (s *State) allFailingLocked(now time.Time) (all, atThreshold, recovered bool) {
	if s.HoldWhenAllFail < 2 {
		return false, false, false
	}
	s.verdictMu.Lock()
	defer s.verdictMu.Unlock()
	if v := s.verdict; v.valid && !now.Before(v.at) && now.Sub(v.at) < verdictRecheck {
		return v.all, v.atThreshold, v.recovered
	}
	all, atThreshold, recovered = s.judgeAllFailingLocked(now)
	s.verdict = allFailing{at: now, valid: true, all: all, atThreshold: atThreshold, recovered: recovered}
	s.scans++
	return all, atThreshold, recovered
}

// judgeAllFailingLocked is allFailingLocked's judgement, made afresh.
func (s *State) judgeAllFailingLocked(now time.Time) (all, atThreshold, recovered bool) {
	const (
		pending = iota + 1
		failing
		healthy
	)
	backends := map[string]int{}
	for key, st := range s.targets {
		facts := s.known[key]
		backend := st.Backend
		if backend == "" {
			backend = key
		}
		var verdict int
		switch {
		case st.Problem != "", st.Last.Outcome == "" && st.LastUnknown != nil:
			continue
		case st.Last.Outcome == "":
			verdict = pending
		case facts.interval > 0 && now.Sub(st.DecidedAt) > HoldFreshFor*facts.interval:
			continue // stale: says nothing now
		case st.Last.Outcome == probe.OutcomeFailed:
			verdict = failing
			atThreshold = atThreshold || st.Failures >= max(facts.openAfter, 1)
		default:
			return false, false, true
		}
		backends[backend] = max(backends[backend], verdict)
	}
	nFailing, nPending := 0, 0
	for _, v := range backends {
		switch v {
		case failing:
			nFailing++
		case pending:
			nPending++
		}
	}
	return nFailing >= 1 && nFailing+nPending >= s.HoldWhenAllFail, atThreshold, false
}

// targetsOf returns the targets in kind's configuration.
func targetsOf(targets []config.Target, kind circuit.Kind, configuration string) []config.Target {
	var out []config.Target
	for _, t := range targets {
		if t.Kind == kind && t.Configuration == configuration {
			out = append(out, t)
		}
	}
	return out
}

// maxMinOpenDoublings caps the doubling of MinOpen at 32 times.
const maxMinOpenDoublings = 5

// minOpen is base doubled for every apiserver opening after the first
// since the apiserver's calls last succeeded.
func minOpen(base time.Duration, openings int) time.Duration {
	return decide.Doubled(base, openings-1, maxMinOpenDoublings)
}
