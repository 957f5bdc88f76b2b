package breaker

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

type warmed struct {
	mu       sync.Mutex
	services []string
}

func (w *warmed) Warm(_ context.Context, namespace, name string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.services = append(w.services, namespace+"/"+name)
	return nil
}

// TestServiceWarmer_warmsEachTargetServiceOnce: every target webhook's
// Service is warmed, once however many targets share it; a url webhook,
// a webhook that is not a target and a missing configuration warm
// nothing.
func TestServiceWarmer_warmsEachTargetServiceOnce(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	svc := func(wh admissionregistrationv1.MutatingWebhook, ns, name string) admissionregistrationv1.MutatingWebhook {
		wh.ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: name, Port: ptr.To[int32](443)}}
		return wh
	}
	url := breakertest.Webhook(breakertest.WhOther, breakertest.PolicyFail)
	url.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:8443/mutate")}
	cfg := breakertest.Config(
		svc(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail), "team", "hook"),
		svc(breakertest.Webhook(breakertest.WhB, breakertest.PolicyFail), "team", "hook"),
		url,
		svc(breakertest.Webhook(breakertest.WhMissing, breakertest.PolicyFail), "team", "not-a-target"),
	)
	targets := []config.Target{
		breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2),
		breakertest.Target(breakertest.WhB, config.ModeBypass, 3, 2),
		breakertest.Target(breakertest.WhOther, config.ModeBypass, 3, 2),
		{Kind: circuit.KindMutating, Configuration: "absent", Webhook: "x.example.com"},
	}
	services := &warmed{}
	w := &ServiceWarmer{Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(cfg).Build(), Targets: targets, Services: services}
	assert.Equal(t, 1, w.WarmOnce(t.Context()))
	assert.Equal(t, []string{"team/hook"}, services.services)
}
