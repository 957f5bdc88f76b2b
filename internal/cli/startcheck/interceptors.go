package startcheck

import (
	"context"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/intercept"
)

// interceptTimeout bounds the reads of WarnInterceptors: two lists.
const interceptTimeout = 10 * time.Second

// Interception says what WarnInterceptors judges the webhooks for.
type Interception struct {
	// Namespace is where the service's Lease is and leader election
	// records its Events (--leader-election-namespace). Required.
	Namespace string
	// LeaderElection is --leader-elect: without it the service holds no
	// Lease. Default false.
	LeaderElection bool
	// Config is the service's configuration: the marking canary is sent
	// only before a mutating target opens. Required.
	Config *config.Configuration
}

// WarnInterceptors logs, once and at info level, each webhook with
// failurePolicy Fail that intercepts the service's own requests (its
// Lease, its Events, its marking canary: intercept.Find), with what that
// costs the service while the webhook fails and the namespaceSelector
// expression that fixes it. It is advice: it never fails, and it returns
// within interceptTimeout, logging what it could not read. Its reads are
// lists, which no webhook intercepts; it writes nothing, so it emits no
// Event. Call it in its own goroutine: on the bad day the apiserver is
// slow, and the start must not wait for advice.
//
// It does not read Namespaces (the service may not): namespaceSelectors
// are judged by kubernetes.io/metadata.name, the label kube-apiserver sets
// on every namespace, by which policy engines' webhooks exclude
// namespaces. A selector on another label is judged as if the namespace
// did not carry it; "guard webhooks", run by an administrator, reads the
// labels.
func WarnInterceptors(ctx context.Context, c client.Reader, in Interception) {
	log := logf.FromContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, interceptTimeout)
	defer cancel()
	mwcs := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	vwcs := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	for _, list := range []client.ObjectList{mwcs, vwcs} {
		if err := c.List(ctx, list); err != nil {
			log.Info("Could not check which webhooks intercept the guard's own requests", "error", err.Error())
			return
		}
	}
	found := intercept.Find(intercept.Inputs{
		Namespace:             in.Namespace,
		WithoutLeaderElection: !in.LeaderElection,
		WithoutMarking: !slices.ContainsFunc(in.Config.Targets, func(t config.Target) bool {
			return t.Kind == circuit.KindMutating && !t.Observes()
		}),
		Mutating:   mwcs.Items,
		Validating: vwcs.Items,
	})
	for _, i := range found {
		var what []string
		for _, r := range i.Intercepts {
			what = append(what, r.String())
		}
		log.Info("Warning: a webhook with failurePolicy Fail intercepts the guard's own requests; while it fails the guard loses them (guard webhooks lists them all)",
			"kind", i.Kind, "configuration", i.Configuration, "webhook", i.Webhook, "timeoutSeconds", i.TimeoutSeconds,
			"intercepts", what, "mayIntercept", i.MatchConditions, "advice", intercept.Advice(i, in.Namespace))
	}
}
