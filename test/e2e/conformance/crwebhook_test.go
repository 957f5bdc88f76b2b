package conformance

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// What ./crwebhook does, by its constants.
const (
	crDefaultedLabel = "conformance.webhook-guard.io/defaulted"
	crForbiddenKey   = "forbidden"
)

// TestConformance_controllerRuntime: a controller-runtime webhook as
// kubebuilder scaffolds it (a Defaulter and a Validator for ConfigMaps,
// ctrl.NewWebhookManagedBy), whose responses carry no Content-Type.
func TestConformance_controllerRuntime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &suite{t: t, name: "crwebhook", ns: "conformance-crwebhook"}
	require.NoError(t, env.EnsureNamespace(ctx, s.ns))

	dir := t.TempDir()
	bin := filepath.Join(dir, "crwebhook")
	buildCommand(t, "go", "build", "-trimpath", "-o", bin, "./test/e2e/conformance/crwebhook")
	caPEM := servingCert(t, dir)
	port := freePort(t)
	id, err := env.ServiceAccount(ctx, s.ns, "crwebhook")
	require.NoError(t, err)
	s.process = startProcess(t, "crwebhook", bin, []string{"KUBECONFIG=" + id.KubeconfigPath},
		"--webhook-host", "127.0.0.1", "--webhook-port", strconv.Itoa(port), "--webhook-cert-path", dir)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.process.waitServing(t, addr, caPEM)

	// What controller-gen renders from the scaffold's +kubebuilder:webhook
	// markers (config/webhook/manifests.yaml), with clientConfig.url and
	// caBundle for the process on loopback instead of the scaffold's
	// webhook-service Service, and a namespaceSelector (the scaffold has
	// none) so that the outage cannot block ConfigMaps elsewhere in the
	// control plane.
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": s.ns}}
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "conformance-crwebhook-mutating-webhook-configuration"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "mconfigmap-v1.kb.io",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + "/mutate--v1-configmap"), CABundle: caPEM},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			Rules:                   rules,
			NamespaceSelector:       selector,
		}},
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "conformance-crwebhook-validating-webhook-configuration"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "vconfigmap-v1.kb.io",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + "/validate--v1-configmap"), CABundle: caPEM},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			Rules:                   rules,
			NamespaceSelector:       selector,
		}},
	}
	require.NoError(t, env.Client.Create(ctx, mwc))
	require.NoError(t, env.Client.Create(ctx, vwc))
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), mwc)
		_ = env.Client.Delete(context.Background(), vwc)
	})
	s.targets = []target{
		{kind: circuit.KindMutating, config: mwc.Name, hook: mwc.Webhooks[0].Name, mode: "Bypass"},
		{kind: circuit.KindValidating, config: vwc.Name, hook: vwc.Webhooks[0].Name, mode: "Ignore"},
	}

	// Each round creates a ConfigMap both webhooks see: it must come back
	// defaulted. Every fifth round also creates one the validator denies.
	s.traffic = func(ctx context.Context, round int) error {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, GenerateName: "traffic-"},
			Data:       map[string]string{"round": strconv.Itoa(round)},
		}
		if err := env.Client.Create(ctx, cm); err != nil {
			return fmt.Errorf("round %d: creating a ConfigMap: %w", round, err)
		}
		if cm.Labels[crDefaultedLabel] != "true" {
			return fmt.Errorf("round %d: ConfigMap %s was not defaulted: labels %v", round, cm.Name, cm.Labels)
		}
		if round%5 != 0 {
			return nil
		}
		bad := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, GenerateName: "denied-"},
			Data:       map[string]string{crForbiddenKey: "yes"},
		}
		err := env.Client.Create(ctx, bad)
		if err == nil || !strings.Contains(err.Error(), `admission webhook "vconfigmap-v1.kb.io" denied the request`) {
			return fmt.Errorf("round %d: a ConfigMap with data key %q: want the validator's denial, got %v", round, crForbiddenKey, err)
		}
		return nil
	}
	s.run("conformance-crwebhook")
}
