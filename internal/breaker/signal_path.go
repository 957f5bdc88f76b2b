package breaker

import (
	"context"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// PathProber probes kube-apiserver's road to a service-backed webhook;
// *probe.PathProber implements it.
type PathProber interface {
	Probe(ctx context.Context, svc admissionregistrationv1.ServiceReference, path string, timeout time.Duration) probe.Result
}

var _ PathProber = (*probe.PathProber)(nil)

// PathProbeUnknown is the Event reason when the path probe of a target
// whose apiserver calls fail cannot judge the road: nothing opens on the
// apiserver signal until it can.
const PathProbeUnknown = "PathProbeUnknown"

// RoadOf is how kube-apiserver reaches wh.
func RoadOf(wh *admissionregistrationv1.MutatingWebhook) decide.Road {
	switch {
	case wh == nil:
		return decide.RoadUnknown
	case wh.ClientConfig.Service != nil:
		return decide.RoadService
	case wh.ClientConfig.URL != nil:
		return decide.RoadURL
	}
	return decide.RoadUnknown
}

// startPathProbe starts the path probe of t when it is needed
// (PathProbeNeeded) and the road schedule does not cover t, beside the
// direct probe, so that a slow road and a
// slow webhook do not add up in the target's loop. The returned func
// waits for it, records the evidence (with the road, and any
// configuration sharing the webhook's name) and returns it; it must be
// called once.
func (r *ProbeRunner) startPathProbe(ctx context.Context, t config.Target, obj client.Object, view *circuit.ConfigView, wh *admissionregistrationv1.MutatingWebhook) func() decide.Path {
	if !t.APIServerSignal.Enabled {
		return func() decide.Path { return decide.Path{} }
	}
	road := RoadOf(wh)
	st, _ := r.State.Get(t.Key())
	entry, open := circuit.Entry{}, false
	if view.Annotations[circuit.Annotation] != "" {
		if s := r.snapshot(t.Kind, view); s.RecordErr == nil {
			entry, open = s.Record[t.Webhook]
			open = open && entry.Mine(r.Signer)
		}
	}
	if t.Observes() {
		// No record: what would be open is in memory.
		open, entry = st.WouldBeOpen(), circuit.Entry{Signal: st.WouldOpenSignal}
	}
	need := decide.PathProbeNeeded(open, entry, st.APIServer)
	shared := ""
	if need {
		shared = r.webhookNames(ctx).sharedWith(t)
	}
	if road == decide.RoadService && r.roads != nil && r.roads.has(t.Key()) {
		// The road schedule probes it every interval; its counts stay.
		r.State.SetRoad(t.Key(), road, shared, true)
		return func() decide.Path {
			st, _ := r.State.Get(t.Key())
			return st.Path
		}
	}
	if !need || road != decide.RoadService {
		r.State.SetRoad(t.Key(), road, shared, need)
		return func() decide.Path {
			st, _ := r.State.Get(t.Key())
			return st.Path
		}
	}
	done := make(chan probe.Result, 1)
	if r.PathProber == nil {
		done <- probe.Result{Outcome: probe.OutcomeUnknown, Err: fmt.Errorf("no path prober")}
	} else {
		svc := *wh.ClientConfig.Service
		path, timeout := pathProbePath(t, svc), probe.PathTimeout(*wh, probe.Spec{Timeout: t.Probe.Timeout})
		go func() { done <- r.PathProber.Probe(ctx, svc, path, timeout) }()
	}
	return func() decide.Path {
		res := <-done
		if ctx.Err() != nil {
			return st.Path
		}
		return r.recordPath(ctx, t, obj, road, shared, res)
	}
}

// recordPath records one path probe result of t, counts it, and reports
// the first Unknown of a run.
func (r *ProbeRunner) recordPath(ctx context.Context, t config.Target, obj client.Object, road decide.Road, shared string, res probe.Result) decide.Path {
	path := r.State.ObservePath(t.Key(), road, shared, res)
	r.Metrics.PathProbes.WithLabelValues(string(t.Kind), t.Configuration, t.Webhook, string(res.Outcome)).Inc()
	log := logf.FromContext(ctx)
	if log.V(1).Enabled() {
		log.V(1).Info("Path probe", "outcome", res.Outcome, "reason", res.Reason, "error", res.Err, "duration", res.Duration, "consecutiveFailures", path.Failures, "consecutiveSuccesses", path.Successes)
	}
	if res.Outcome == probe.OutcomeUnknown && path.Unknowns == 1 {
		log.Info("Path probe could not run; the apiserver signal opens nothing meanwhile", "error", res.Err)
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, PathProbeUnknown, "Probe", "%s", circuit.EventNote(
			"%s: the probe of kube-apiserver's road to the webhook, through its service proxy, could not run (%v): until it can, the apiserver's own failing calls open nothing for this webhook, and a circuit they opened stays open",
			t.Webhook, res.Err))
	}
	return path
}

// pathProbePath is what the path probe GETs on the webhook's server: an
// HTTPGet probe's health path, or else the webhook's own path. Any answer
// there shows the road works.
func pathProbePath(t config.Target, svc admissionregistrationv1.ServiceReference) string {
	if t.Probe.Kind == config.ProbeHTTPGet && t.Probe.Path != "" {
		return t.Probe.Path
	}
	return ptr.Deref(svc.Path, "/")
}
