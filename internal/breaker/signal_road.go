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

// PathProbesPerSecond is the budget of the continuous path probe: at most
// this many GETs through kube-apiserver's service proxy start per second,
// across all Services. A proxied GET costs kube-apiserver one
// authenticated, authorized request and one round trip to the webhook's
// server, plus a TLS dial when its proxy transport holds no idle
// connection to the endpoint: 2.6-4.2 ms of its CPU each as measured
// (make bench, section road), so at 10 a second about 0.03-0.04 of a
// core, however many Services there are. Up to 10
// Services are each probed every interval (default 1 s); beyond that,
// least recently probed first, each every ceil(services/10) seconds: 10 s
// at 100 Services, 100 s at 1,000.
const PathProbesPerSecond = 10

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
	svc     admissionregistrationv1.ServiceReference
	path    string
	timeout time.Duration
	members []roadTarget
}

// roadSchedule picks which Service's road to path-probe next: one probe
// per distinct Service and port per interval (the shortest of its
// targets'), shared by all of them, at most MaxProbesInFlight of them
// outstanding, least recently probed first.
type roadSchedule struct {
	mu       sync.Mutex
	targets  map[string]roadTarget // by target key
	last     map[string]time.Time  // by road: when its last probe started
	inFlight map[string]int        // by road
}

func newRoadSchedule() *roadSchedule {
	return &roadSchedule{targets: map[string]roadTarget{}, last: map[string]time.Time{}, inFlight: map[string]int{}}
}

// roadKey names a Service port: "<namespace>/https:<name>:<port>".
func roadKey(svc admissionregistrationv1.ServiceReference) string {
	return svc.Namespace + "/" + probe.ProxyName(svc)
}

// set adds or updates rt; drop removes the target key.
func (s *roadSchedule) set(rt roadTarget) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.targets[rt.t.Key()] = rt
}

func (s *roadSchedule) drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.targets, key)
}

func (s *roadSchedule) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.targets[key]
	return ok
}

// next returns the road due at now (its interval passed since its last
// probe started, fewer than its limit outstanding) that was probed least
// recently, and marks it started; false when none is due. done must be
// called with its road when the probe ends.
func (s *roadSchedule) next(now time.Time) (roadProbe, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	roads := map[string]*roadProbe{}
	every, limit := map[string]time.Duration{}, map[string]int{}
	for _, key := range slices.Sorted(maps.Keys(s.targets)) {
		rt := s.targets[key]
		k := roadKey(rt.svc)
		rp, ok := roads[k]
		if !ok {
			rp = &roadProbe{road: k, svc: rt.svc, path: rt.path, timeout: rt.timeout}
			roads[k], every[k] = rp, rt.t.Probe.Interval
		}
		rp.members = append(rp.members, rt)
		rp.timeout, every[k] = min(rp.timeout, rt.timeout), min(every[k], rt.t.Probe.Interval)
		limit[k] = max(limit[k], MaxProbesInFlight(rt.t))
	}
	var pick *roadProbe
	for _, k := range slices.Sorted(maps.Keys(roads)) {
		last, ok := s.last[k]
		if ok && now.Sub(last) < every[k] || s.inFlight[k] >= limit[k] {
			continue
		}
		if pick == nil || last.Before(s.last[pick.road]) {
			pick = roads[k]
		}
	}
	if pick == nil {
		return roadProbe{}, false
	}
	s.last[pick.road] = now
	s.inFlight[pick.road]++
	return *pick, true
}

func (s *roadSchedule) done(road string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight[road]--
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

// roadLoop is the road schedule's loop: every 1/PathProbesPerSecond s it
// starts the path probe of at most one road (roadSchedule.next), without
// waiting for those outstanding, and records each result for every target
// behind that road. The probes it starts join wg.
func (r *ProbeRunner) roadLoop(ctx context.Context, wg *sync.WaitGroup) {
	tick := time.Second / PathProbesPerSecond
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
			defer r.roads.done(rp.road)
			res := r.PathProber.Probe(ctx, rp.svc, rp.path, rp.timeout)
			if ctx.Err() != nil {
				return
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
