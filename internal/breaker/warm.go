package breaker

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// ServiceWarmer starts, on every replica, the Service watches the leader's
// probes resolve through, and the informers of the targets'
// configurations: a follower that takes over after a failover then
// resolves its first probes from what it already watches, instead of
// listing them from an apiserver that the outage which cost the old
// leader its Lease may be slowing down (docs/how-it-works.md, "Service
// resolution").
type ServiceWarmer struct {
	// Reader is the manager's cache; a List starts and syncs its informer.
	Reader client.Reader
	// Targets are the approved webhooks.
	Targets []config.Target
	// Services starts the watch of one Service without waiting for it
	// (probe.WatchingResolver.Warm).
	Services interface {
		Warm(ctx context.Context, namespace, name string) error
	}
	// Every is how often it looks again for Services the targets came to
	// use; zero means WarmEvery.
	Every time.Duration

	warmed int // how many Services the last look asked for
}

// WarmEvery is how often a ServiceWarmer looks for Services the targets
// came to use since it last looked.
const WarmEvery = 30 * time.Second

// NeedLeaderElection is false: warming is for the replicas that do not
// lead yet.
func (w *ServiceWarmer) NeedLeaderElection() bool { return false }

// Start warms at once and then every Every, until ctx ends.
func (w *ServiceWarmer) Start(ctx context.Context) error {
	every := w.Every
	if every <= 0 {
		every = WarmEvery
	}
	for {
		w.WarmOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

// WarmOnce reads every target configuration from the cache and starts the
// watch of each target webhook's Service. It returns how many Services it
// asked for. A configuration or webhook that does not exist is skipped:
// the next look finds it.
func (w *ServiceWarmer) WarmOnce(ctx context.Context) int {
	log := logf.FromContext(ctx)
	asked := map[[2]string]bool{}
	for _, t := range w.Targets {
		obj := t.Kind.New()
		if err := w.Reader.Get(ctx, client.ObjectKey{Name: t.Configuration}, obj); err != nil {
			continue
		}
		view, err := circuit.ReadView(obj)
		if err != nil {
			continue
		}
		wh := circuit.FindWebhook(view, t.Webhook)
		if wh == nil || wh.ClientConfig.Service == nil {
			continue
		}
		key := [2]string{wh.ClientConfig.Service.Namespace, wh.ClientConfig.Service.Name}
		if asked[key] {
			continue
		}
		asked[key] = true
		if err := w.Services.Warm(ctx, key[0], key[1]); err != nil {
			log.V(1).Info("Could not start a Service's watch ahead of leading", "service", key[0]+"/"+key[1], "error", err)
		}
	}
	if len(asked) != w.warmed {
		w.warmed = len(asked)
		log.Info("Watching the targets' Services, ahead of leading", "services", len(asked))
	}
	return len(asked)
}
