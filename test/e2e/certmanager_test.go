package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/certs"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// A TLS probe failure on a configuration whose caBundle cert-manager
// injects is explained by the Certificate's state: here, not Ready.
func TestCertManager_tlsFailureIsDiagnosedFromTheCertificate(t *testing.T) {
	ctx := context.Background()
	installCertManagerCRDs(t, ctx)
	s := newBreakerSetup(t, setupOptions{mode: "Ignore"})

	cert := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1",
		"kind":       "Certificate",
		"metadata":   map[string]any{"name": "slow-mutator-serving", "namespace": s.ns},
		"spec":       map[string]any{"secretName": "slow-mutator-serving", "dnsNames": []any{"slow-mutator." + s.ns + ".svc"}, "issuerRef": map[string]any{"name": "ca"}},
	}}
	require.NoError(t, env.Client.Create(ctx, cert))
	// cert-manager's CRD has a status subresource: the status is written
	// through it, as cert-manager's controller does.
	cert.Object["status"] = map[string]any{"conditions": []any{map[string]any{
		"type": "Ready", "status": "False", "reason": "DoesNotExist", "message": "Issuing certificate as Secret does not exist",
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	}}}
	require.NoError(t, env.Client.Status().Update(ctx, cert))

	// The webhook now presents a certificate its caBundle does not trust,
	// as when cert-manager has not (re)injected the CA.
	other, err := harness.StartWebhook(harness.WebhookOptions{Host: "127.0.0.1"})
	require.NoError(t, err)
	t.Cleanup(other.Close)
	mwc := s.get()
	mwc.Annotations = map[string]string{certs.InjectCAFromAnnotation: s.ns + "/slow-mutator-serving"}
	findWebhook(mwc, s.hook).ClientConfig.CABundle = other.CA.CertPEM
	require.NoError(t, env.Client.Update(ctx, mwc))

	s.startGuard("guard")
	var note string
	require.Eventually(t, func() bool {
		list := &eventsv1.EventList{}
		if env.Client.List(ctx, list, client.InNamespace(metav1.NamespaceDefault)) != nil {
			return false
		}
		for _, e := range list.Items {
			if e.Regarding.Name == s.name && e.Reason == "ProbeTLSFailure" {
				note = e.Note
				return true
			}
		}
		return false
	}, transition, 50*time.Millisecond, "no ProbeTLSFailure Event")
	t.Logf("ProbeTLSFailure: %s", note)
	assert.Contains(t, note, "slow-mutator-serving")
	assert.Contains(t, note, "not Ready")
	assert.Contains(t, note, "DoesNotExist")
	assert.True(t, strings.HasPrefix(note, s.hook+": "), note)
}
