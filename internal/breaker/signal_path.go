package breaker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

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

// The values of webhook_guard_path_probes_total's outcome label.
var PathOutcomes = []probe.Outcome{probe.OutcomeHealthy, probe.OutcomeFailed, probe.OutcomeUnknown}

// RoadOf is how kube-apiserver reaches wh.
func RoadOf(wh *admissionregistrationv1.MutatingWebhook) Road {
	switch {
	case wh == nil:
		return RoadUnknown
	case wh.ClientConfig.Service != nil:
		return RoadService
	case wh.ClientConfig.URL != nil:
		return RoadURL
	}
	return RoadUnknown
}

// startPathProbe starts the path probe of t when it is needed
// (PathProbeNeeded) and the road schedule does not cover t, beside the
// direct probe, so that a slow road and a
// slow webhook do not add up in the target's loop. The returned func
// waits for it, records the evidence (with the road, and any
// configuration sharing the webhook's name) and returns it; it must be
// called once.
func (r *ProbeRunner) startPathProbe(ctx context.Context, t config.Target, obj client.Object, view *admissionregistrationv1.MutatingWebhookConfiguration, wh *admissionregistrationv1.MutatingWebhook) func() Path {
	if !t.APIServerSignal.Enabled {
		return func() Path { return Path{} }
	}
	road := RoadOf(wh)
	st, _ := r.State.Get(t.Key())
	entry, open := circuit.Entry{}, false
	if view.Annotations[circuit.Annotation] != "" {
		if rec, err := circuit.Decode(view.Annotations); err == nil {
			entry, open = rec[t.Webhook]
			open = open && entry.Mine(r.Signer)
		}
	}
	if t.Observes() {
		// No record: what would be open is in memory.
		open, entry = st.WouldBeOpen(), circuit.Entry{Signal: st.WouldOpenSignal}
	}
	need := PathProbeNeeded(open, entry, st.APIServer)
	shared := ""
	if need {
		shared = r.sharedName(ctx, t)
	}
	if road == RoadService && r.roads != nil && r.roads.has(t.Key()) {
		// The road schedule probes it every interval; its counts stay.
		r.State.SetRoad(t.Key(), road, shared, true)
		return func() Path {
			st, _ := r.State.Get(t.Key())
			return st.Path
		}
	}
	if !need || road != RoadService {
		r.State.SetRoad(t.Key(), road, shared, need)
		return func() Path {
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
	return func() Path {
		res := <-done
		if ctx.Err() != nil {
			return st.Path
		}
		return r.recordPath(ctx, t, obj, road, shared, res)
	}
}

// recordPath records one path probe result of t, counts it, and reports
// the first Unknown of a run.
func (r *ProbeRunner) recordPath(ctx context.Context, t config.Target, obj client.Object, road Road, shared string, res probe.Result) Path {
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

// sharedName returns the name of another configuration of t's kind that
// has a webhook named like t's, or "": kube-apiserver's metrics name
// webhooks by name only, so its calls are counted with t's (Istio's
// revisions do exactly this).
func (r *ProbeRunner) sharedName(ctx context.Context, t config.Target) string {
	opts := &client.ListOptions{UnsafeDisableDeepCopy: ptr.To(true)}
	webhooks := map[string][]string{} // configuration name → webhook names
	if t.Kind == circuit.KindValidating {
		list := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
		if err := r.Reader.List(ctx, list, opts); err != nil {
			return ""
		}
		for _, c := range list.Items {
			for _, wh := range c.Webhooks {
				webhooks[c.Name] = append(webhooks[c.Name], wh.Name)
			}
		}
	} else {
		list := &admissionregistrationv1.MutatingWebhookConfigurationList{}
		if err := r.Reader.List(ctx, list, opts); err != nil {
			return ""
		}
		for _, c := range list.Items {
			for _, wh := range c.Webhooks {
				webhooks[c.Name] = append(webhooks[c.Name], wh.Name)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(webhooks)) {
		if name != t.Configuration && slices.Contains(webhooks[name], t.Webhook) {
			return name
		}
	}
	return ""
}

// pathNote says, for an opening Event, what confirmed the apiserver's
// failing calls, or what the path probe alone found.
func pathNote(signal string, path Path) string {
	if signal == SignalRoad {
		return fmt.Sprintf(": %d probes in a row through kube-apiserver's service proxy, which dials through the same egress as its webhook calls, failed to connect (last: %s: %v); no request a tenant sends can cause that",
			path.Failures, path.Last.Reason, path.Last.Err)
	}
	if signal != SignalAPIServer && signal != SignalBoth {
		return ""
	}
	switch path.Road {
	case RoadService:
		return fmt.Sprintf("; confirmed by %d failed probes in a row through kube-apiserver's service proxy, which dials through the same egress as its webhook calls (last: %s: %v)",
			path.Failures, path.Last.Reason, path.Last.Err)
	case RoadURL:
		return "; no probe travels a url webhook's road, and withoutPathProbe: Open lets the apiserver's calls alone open it"
	}
	return ""
}

// pathClosedBecause says, for a closing Event, why the path probe closed
// a circuit.
func pathClosedBecause(path Path) string {
	return fmt.Sprintf("after %d consecutive healthy probes through kube-apiserver's service proxy: its road to the webhook works again", path.Successes)
}

// pathSays explains, for the SignalsDisagree Event of a target whose
// direct probe is healthy while the apiserver's calls fail, what the path
// evidence says about the road.
func pathSays(t config.Target, path Path) string {
	shared := ""
	if path.SharedWith != "" {
		shared = fmt.Sprintf("; kube-apiserver also counts the webhook of the same name in %s %s under this name", t.Kind.ObjectKind(), path.SharedWith)
	}
	switch {
	case path.Road == RoadService && path.Failures > 0:
		return fmt.Sprintf(": a probe through kube-apiserver's service proxy, which dials through the same egress, fails too (%s: %v): the apiserver's path to the webhook is broken; "+
			"check konnectivity or the egress proxy, firewalls between the control plane and the nodes, and NetworkPolicies allowing the control plane to the webhook's port%s", path.Last.Reason, path.Last.Err, shared)
	case path.Road == RoadService && path.Successes > 0:
		return fmt.Sprintf(": a probe through kube-apiserver's service proxy, which dials through the same egress, reaches the webhook's server, so the road works: "+
			"the failing calls fail because of what they carry (requests the webhook cannot answer in time) or are another webhook's of the same name%s; nothing opens on them", shared)
	case path.Road == RoadService && path.LastUnknown != nil:
		return fmt.Sprintf(": the probe through kube-apiserver's service proxy cannot tell whether the road works (%v), so nothing opens on them%s", path.LastUnknown.Err, shared)
	case path.Road == RoadURL && PathBroken(path, t, 1):
		return ": the apiserver's path to the webhook is broken (withoutPathProbe: Open: no probe travels a url webhook's road, so the apiserver's calls alone open it); check the control plane's route to the webhook's URL"
	case path.Road == RoadURL:
		return fmt.Sprintf(": no probe travels a url webhook's road, so nothing opens on them (withoutPathProbe: Report): check the control plane's route to the webhook's URL, or requests that make the webhook fail%s", shared)
	}
	return ": the apiserver's path to the webhook may be broken; nothing opens until a probe through kube-apiserver's service proxy confirms it" + shared
}
