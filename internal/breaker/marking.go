package breaker

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/marking"
)

// The reconciler's side of marking (the rules are decide's, in
// decide/arming.go): it reads whether each marking policy is in place,
// and sends the canary a step asks for.

// marking is what NextStep needs to know of s's marking: whether its
// openings arm marking at all (Marker set), and why the marking policy of
// each target that could open is not in place (Marker.Check, a read of
// the cache). Only a target with a failure in some signal can open; the
// others are not checked, which at a thousand targets saved rendering
// every policy on every reconcile.
func (r *ConfigurationReconciler) marking(ctx context.Context, s decide.Snapshot, in decide.Inputs) decide.Marking {
	if r.Marker == nil {
		return decide.Marking{}
	}
	mk := decide.Marking{On: true, Policies: map[string]string{}}
	if s.View.Annotations[circuit.OverrideAnnotation] != "" {
		return mk // handed over: nothing opens
	}
	for _, t := range in.Targets {
		ev := in.Evidence[t.Webhook]
		if ev.Probe.Failures == 0 && ev.APIServer.Failures == 0 && ev.Path.Failures == 0 {
			continue
		}
		if err := r.Marker.Check(ctx, marking.Circuit{Configuration: s.View.Name, Webhook: t.Webhook}); err != nil {
			mk.Policies[t.Webhook] = err.Error()
		}
	}
	return mk
}

// canary asks kube-apiserver, with one canary bounded by timeout, whether
// it marks with the arming entries of hooks, and returns mem with the
// answer (decide.Memory.CanaryAnswered).
//
// The canary goes through admission, so a failing webhook that
// intercepts Events (a policy engine's */*) makes it wait and fail:
// NextStep bounds its timeout, and after a failure asks for none for the
// configuration for a bound.
func (r *ConfigurationReconciler) canary(ctx context.Context, view *circuit.ConfigView, hooks []string, timeout time.Duration, mem decide.Memory) decide.Memory {
	cs := make([]marking.Circuit, 0, len(hooks))
	for _, hook := range hooks {
		cs = append(cs, marking.Circuit{Configuration: view.Name, Webhook: hook})
	}
	canaryCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	notYet, err := r.Marker.Armed(canaryCtx, cs)
	if err != nil {
		r.Metrics.CanaryFailures.Inc()
		logf.FromContext(ctx).V(1).Info("Marking canary failed", "error", err)
	}
	var unshown []string
	for _, c := range notYet {
		unshown = append(unshown, c.Webhook)
	}
	return mem.CanaryAnswered(view.UID, hooks, unshown, err, now(r.Clock))
}

// markingFailed reports, once per opening, that its marking policy is not
// in place: the opening waits markingBound for it, then goes unmarked.
func (r *ConfigurationReconciler) markingFailed(cur client.Object, why string) {
	r.Metrics.WriteErrors.Inc()
	r.Recorder.Eventf(cur, nil, corev1.EventTypeWarning, "MarkingFailed", "Update",
		"the marking policy, which marks what is admitted without the webhook, is not in place; the circuit opens without it once the opening has waited for it: %s", why)
}
