package breaker

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// PathProbeGap is the budget of the continuous path probe while every
// road answers: at most one GET through kube-apiserver's service proxy
// starts per gap, across all Services, about 1.4 a second. A proxied GET
// costs kube-apiserver one authenticated, authorized request and one round
// trip to the webhook's server, plus a TLS dial when its proxy transport
// holds no idle connection to the endpoint (it keeps one 90 s). As
// measured (make bench, section road), a lone proxied GET costs
// kube-apiserver 5-6 ms of CPU, whoever sends it (the bench's own GETs at
// the same pace cost the same), three times what the same GETs cost back
// to back: at 2 a second, about 1.1% of a core at 100 Services. At one per
// 700 ms it is about 0.8%, and each of up to 128 roads comes back within
// kube-apiserver's 90 s, so its connection is kept; at 1,000, where every
// probe dials, 9.9 ms a probe, 1.4% of a core. One Service is probed every interval
// (default 1 s); beyond that, least recently probed first, each every
// services × 0.7 seconds: 70 s at 100 Services; a road whose webhook's
// calls the last apiserver read found failing goes next (hurry).
const PathProbeGap = 700 * time.Millisecond

// SuspectPathProbesPerSecond is the budget while the last probe of some
// road failed. A cut egress (konnectivity, an egress proxy) cuts every
// road, so the first failure shows within PathProbeGap; from
// then on the failing roads come first, each once per interval while the
// budget lasts, and the others are swept five times faster, until no
// road's last probe failed.
const SuspectPathProbesPerSecond = 10

// ContinuousRoad reports whether the path probe of t runs every interval
// in the road schedule, rather than only while PathProbeNeeded: its
// apiserver signal is enabled, wh is service-backed, and
// apiserverSignal.pathProbe.service names wh's Service and port, so the
// guard holds the RBAC for it (guard manifests rbac).
func ContinuousRoad(t config.Target, wh *admissionregistrationv1.MutatingWebhook) bool {
	pp := t.APIServerSignal.PathProbe.Service
	if !t.APIServerSignal.Enabled || pp == nil || wh == nil || wh.ClientConfig.Service == nil {
		return false
	}
	svc := wh.ClientConfig.Service
	return pp.Namespace == svc.Namespace && pp.Name == svc.Name && pp.Port == ptr.Deref(svc.Port, 443)
}

// roadTarget is one target the road schedule path-probes.
type roadTarget struct {
	t       config.Target
	svc     admissionregistrationv1.ServiceReference
	path    string
	timeout time.Duration
}

// roadProbe is one path probe the schedule started: the Service, path and
// timeout to probe, and every target behind that Service and port.
type roadProbe struct {
	road    string
	started time.Time
	svc     admissionregistrationv1.ServiceReference
	path    string
	timeout time.Duration
	members []roadTarget
}

// roadSchedule picks which Service's road to path-probe next: one probe
// per distinct Service and port per interval (the shortest of its
// targets'), shared by all of them, at most MaxProbesInFlight of them
// outstanding, within PathProbeGap (SuspectPathProbesPerSecond
// while a road's last probe failed), failing roads first, then least
// recently probed first.
type roadSchedule struct {
	mu       sync.Mutex
	targets  map[string]roadTarget // by target key
	last     map[string]time.Time  // by road: when its last probe started
	inFlight map[string]int        // by road
	failing  map[string]bool       // by road: its last telling probe Failed
	hurried  map[string]bool       // by road: to probe before the least recently probed (hurry), until its next start
	recorded map[string]time.Time  // by road: when the probe it last recorded started
	started  time.Time             // when the last probe of any road started
	// grouped is the targets grouped by road (roads), nil when a target
	// changed since: every probe notes its target again (set), and the
	// loop asks for the next road ten times a second, so at 1,000 targets
	// regrouping each time cost more than the probes.
	grouped *roadGroups
}

// roadGroups are the targets grouped by road: each road's probe, interval
// (the shortest of its targets') and limit of outstanding probes, and the
// roads in order.
type roadGroups struct {
	roads map[string]*roadProbe
	every map[string]time.Duration
	limit map[string]int
	order []string
}

func newRoadSchedule() *roadSchedule {
	return &roadSchedule{targets: map[string]roadTarget{}, last: map[string]time.Time{}, inFlight: map[string]int{}, failing: map[string]bool{},
		hurried: map[string]bool{}, recorded: map[string]time.Time{}}
}

// roadKey names a Service port: "<namespace>/https:<name>:<port>".
func roadKey(svc admissionregistrationv1.ServiceReference) string {
	return svc.Namespace + "/" + probe.ProxyName(svc)
}

// set adds or updates rt; drop removes the target key.
func (s *roadSchedule) set(rt roadTarget) {
	key := rt.t.Key()
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.targets[key]; !ok || !sameRoad(old, rt) {
		s.grouped = nil
	}
	s.targets[key] = rt
}

// sameRoad reports whether a and b group the same: what roads reads of a
// target is its road, path, timeout, interval and limit.
func sameRoad(a, b roadTarget) bool {
	return a.svc.Namespace == b.svc.Namespace && a.svc.Name == b.svc.Name && ptr.Deref(a.svc.Port, 443) == ptr.Deref(b.svc.Port, 443) &&
		a.path == b.path && a.timeout == b.timeout &&
		a.t.Probe.Interval == b.t.Probe.Interval && MaxProbesInFlight(a.t, false) == MaxProbesInFlight(b.t, false)
}

func (s *roadSchedule) drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.targets[key]; ok {
		s.grouped = nil
	}
	delete(s.targets, key)
}

// hurry puts the road of the target key first in line, after the failing
// roads, until its next probe starts: kube-apiserver's own calls to that
// webhook fail, and its road, with more Services than the budget probes in
// an interval, might otherwise wait its turn for up to services ×
// PathProbeGap. It changes neither the budget nor the
// interval, and the probe judges the road as any other: a tenant who makes
// the webhook's calls fail gains an earlier probe of its road, once per
// apiserver read, and no verdict. It does nothing for a target not in the
// schedule.
func (s *roadSchedule) hurry(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rt, ok := s.targets[key]; ok {
		s.hurried[roadKey(rt.svc)] = true
	}
}

func (s *roadSchedule) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.targets[key]
	return ok
}

// next returns the road due at now (its interval passed since its last
// probe started, fewer than its limit outstanding, and the budget allows a
// start), failing roads first, then hurried ones, then the one probed
// least recently, and marks it started; false when none is due. done must
// be called with its road and result when the probe ends.
func (s *roadSchedule) next(now time.Time) (roadProbe, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.roads()
	roads, every, limit := g.roads, g.every, g.limit
	gap := PathProbeGap
	for k := range s.failing {
		if roads[k] == nil {
			delete(s.failing, k) // no target is behind it any more
		} else {
			gap = time.Second / SuspectPathProbesPerSecond
		}
	}
	for k := range s.hurried {
		if roads[k] == nil {
			delete(s.hurried, k)
		}
	}
	if !s.started.IsZero() && now.Sub(s.started) < gap {
		return roadProbe{}, false
	}
	var pick *roadProbe
	for _, k := range g.order {
		last, ok := s.last[k]
		if ok && now.Sub(last) < every[k] || s.inFlight[k] >= limit[k] {
			continue
		}
		if pick == nil || s.before(k, pick.road) {
			pick = roads[k]
		}
	}
	if pick == nil {
		return roadProbe{}, false
	}
	delete(s.hurried, pick.road)
	s.last[pick.road], s.started = now, now
	s.inFlight[pick.road]++
	rp := *pick
	rp.started = now
	return rp, true
}

// before reports whether road a goes before road b: failing roads first,
// then hurried ones, then the one probed least recently; s.mu is held.
func (s *roadSchedule) before(a, b string) bool {
	if s.failing[a] != s.failing[b] {
		return s.failing[a]
	}
	if s.hurried[a] != s.hurried[b] {
		return s.hurried[a]
	}
	return s.last[a].Before(s.last[b])
}

// roads groups the targets by road, with each road's interval (the
// shortest of its targets') and limit of outstanding probes, once for
// each change of the targets; s.mu is held.
func (s *roadSchedule) roads() *roadGroups {
	if s.grouped == nil {
		s.grouped = groupRoads(s.targets)
	}
	return s.grouped
}

func groupRoads(targets map[string]roadTarget) *roadGroups {
	roads, every, limit := map[string]*roadProbe{}, map[string]time.Duration{}, map[string]int{}
	for _, key := range slices.Sorted(maps.Keys(targets)) {
		rt := targets[key]
		k := roadKey(rt.svc)
		rp, ok := roads[k]
		if !ok {
			rp = &roadProbe{road: k, svc: rt.svc, path: rt.path, timeout: rt.timeout}
			roads[k], every[k] = rp, rt.t.Probe.Interval
		}
		rp.members = append(rp.members, rt)
		rp.timeout, every[k] = min(rp.timeout, rt.timeout), min(every[k], rt.t.Probe.Interval)
		limit[k] = max(limit[k], MaxProbesInFlight(rt.t, false))
	}
	return &roadGroups{roads: roads, every: every, limit: limit, order: slices.Sorted(maps.Keys(roads))}
}

// done ends a probe that next started, and reports whether its result is
// current: false when a probe of the same road that started later has
// already ended, so that a probe that hung through a cut and fails after
// the road healed does not count after the healthy ones that followed it.
// A current Failed result marks the road failing and a Healthy one clears
// it; an Unknown says nothing about the road and changes nothing.
func (s *roadSchedule) done(rp roadProbe, res probe.Result) (current bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight[rp.road]--
	if rp.started.Before(s.recorded[rp.road]) {
		return false
	}
	s.recorded[rp.road] = rp.started
	switch res.Outcome {
	case probe.OutcomeFailed:
		s.failing[rp.road] = true
	case probe.OutcomeHealthy:
		delete(s.failing, rp.road)
	}
	return true
}

// noteRoad adds t to the road schedule when ContinuousRoad(t, wh), and
// removes it otherwise.
func (r *ProbeRunner) noteRoad(t config.Target, wh *admissionregistrationv1.MutatingWebhook) {
	if r.roads == nil {
		return
	}
	if !ContinuousRoad(t, wh) {
		r.roads.drop(t.Key())
		return
	}
	svc := *wh.ClientConfig.Service
	r.roads.set(roadTarget{t: t, svc: svc, path: pathProbePath(t, svc), timeout: probe.PathTimeout(*wh, probe.Spec{Timeout: t.Probe.Timeout})})
}

// roadLoop is the road schedule's loop: every 1/SuspectPathProbesPerSecond
// s it starts the path probe of at most one road, within the schedule's
// budget (roadSchedule.next), without
// waiting for those outstanding, and records each result for every target
// behind that road. The probes it starts join wg.
func (r *ProbeRunner) roadLoop(ctx context.Context, wg *sync.WaitGroup) {
	tick := time.Second / SuspectPathProbesPerSecond
	for {
		timer := r.Clock.NewTimer(tick)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		}
		rp, ok := r.roads.next(r.Clock.Now())
		if !ok {
			continue
		}
		wg.Go(func() {
			res := r.PathProber.Probe(ctx, rp.svc, rp.path, rp.timeout)
			if !r.roads.done(rp, res) || ctx.Err() != nil {
				return // a later probe of the road has answered
			}
			for _, m := range rp.members {
				r.roadResult(ctx, m.t, res)
			}
		})
	}
}

// roadResult records one road schedule result for t, and wakes the
// ConfigurationReconciler when the path probe may have opened or closed its
// circuit.
func (r *ProbeRunner) roadResult(ctx context.Context, t config.Target, res probe.Result) {
	obj := t.Kind.New()
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: t.Configuration}, obj, &client.GetOptions{UnsafeDisableDeepCopy: ptr.To(true)}); err != nil {
		return
	}
	view, err := circuit.ReadView(obj)
	if err != nil || obj.GetAnnotations()[circuit.OverrideAnnotation] != "" {
		return
	}
	st, _ := r.State.Get(t.Key())
	path := r.recordPath(ctx, t, obj, decide.RoadService, st.Path.SharedWith, res)
	r.judgeObserved(ctx, t, obj)
	if view.Annotations[circuit.Annotation] == "" && !decide.RoadBroken(path, t.OpenAfter) {
		return // nothing open to close, and nothing to open
	}
	r.wake(ctx, t.Kind, obj, view, r.inputs(t.Kind, view))
}
