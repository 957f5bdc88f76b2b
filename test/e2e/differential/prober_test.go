package differential

import "github.com/webhook-guard/webhook-guard/internal/probe"

// newProber is the guard's prober as the breaker builds it, for url
// webhooks: no Resolver, no system-roots override, no Pool (a fresh connection per
// probe). It is the one place that knows how the prober learns which
// resources the apiserver serves.
func newProber() *probe.Prober {
	return &probe.Prober{Discovery: env.Clientset.Discovery()}
}
