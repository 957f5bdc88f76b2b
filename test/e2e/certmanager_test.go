package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/certs"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
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
		if env.Client.List(ctx, list, client.InNamespace(circuit.EventsNamespace)) != nil {
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

// The metrics endpoint as overlays/cert-manager runs it: the overlay's
// Certificate is issued the way cert-manager's self-signed Issuer issues it
// (no cert-manager controller runs here: a certificate for the
// Certificate's dnsNames, signed by its own key, in a kubernetes.io/tls
// Secret whose ca.crt is that certificate), the Secret's keys are laid out
// in a folder as the kubelet mounts the overlay's volume, and the guard
// runs with the overlay's --metrics-cert-dir pointed there. A real TLS
// handshake verifies the served certificate against the Secret's ca.crt
// for the name the ServiceMonitor verifies, as Prometheus does.
func TestCertManager_metricsAreServedWithTheOverlaysCertificate(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Ignore"})

	var cert struct {
		Spec struct {
			SecretName string   `json:"secretName"`
			DNSNames   []string `json:"dnsNames"`
		} `json:"spec"`
	}
	var dep appsv1.Deployment
	for _, obj := range installDocs(t, installBuild(t, ctx, "cert-manager")) {
		into := map[string]any{"Certificate": &cert, "Deployment": &dep}[obj["kind"].(string)]
		if into == nil {
			continue
		}
		data, err := yaml.Marshal(obj)
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(data, into))
	}
	require.NotEmpty(t, cert.Spec.SecretName, "overlays/cert-manager has no Certificate")
	require.NotEmpty(t, dep.Spec.Template.Spec.Containers)
	var metricsCertDir string
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--metrics-cert-dir="); ok {
			metricsCertDir = v
		}
	}
	require.NotEmpty(t, metricsCertDir, "overlays/cert-manager serves metrics with a self-signed certificate")
	var mounted string
	for _, m := range dep.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.MountPath == metricsCertDir {
			for _, v := range dep.Spec.Template.Spec.Volumes {
				if v.Name == m.Name && v.Secret != nil {
					mounted = v.Secret.SecretName
				}
			}
		}
	}
	require.Equal(t, cert.Spec.SecretName, mounted, "--metrics-cert-dir=%s is not the Certificate's Secret", metricsCertDir)
	// The ServiceMonitor's serverName, for the overlay's namespace.
	serverName := "webhook-guard." + installNamespace + ".svc"
	require.Contains(t, cert.Spec.DNSNames, serverName, "the Certificate is not valid for the name Prometheus verifies")

	// Issued as cert-manager's selfSigned issuer does, into its Secret.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		NotBefore:    time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		DNSNames:    cert.Spec.DNSNames,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: cert.Spec.SecretName},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       certPEM,
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
			certs.CACertKey:         certPEM,
		},
	}
	require.NoError(t, env.Client.Create(ctx, secret))

	// The volume, as the kubelet lays it out: one file per key.
	stored := &corev1.Secret{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(secret), stored))
	dir := t.TempDir()
	for k, v := range stored.Data {
		require.NoError(t, os.WriteFile(filepath.Join(dir, k), v, 0o600))
	}

	metricsAddr := freeAddr(t)
	g := s.startGuard("guard", "--metrics-bind-address", metricsAddr, "--metrics-cert-dir", dir)
	want := tmpl.SerialNumber.String()
	var served string
	require.Eventually(t, func() bool {
		if exited, code := g.Exited(); exited {
			require.FailNow(t, "the guard exited", "exit code %d; logs:\n%s", code, g.Logs())
		}
		served, err = servedSerial(metricsAddr, serverName, stored.Data[certs.CACertKey])
		return err == nil
	}, transition, 50*time.Millisecond, "the metrics endpoint never served a certificate the Secret's ca.crt verifies for %s: %v", serverName, err)
	assert.Equal(t, want, served, "the metrics endpoint serves the Secret's certificate")

	// Without the Secret's certificate in it, the folder is refused at
	// start rather than served self-signed, which no CA would verify.
	empty := s.startGuard("empty", "--metrics-bind-address", freeAddr(t), "--metrics-cert-dir", t.TempDir())
	require.Eventually(t, func() bool {
		exited, _ := empty.Exited()
		return exited
	}, transition, 50*time.Millisecond, "a guard with an empty --metrics-cert-dir did not refuse to start")
	_, code := empty.Exited()
	assert.NotZero(t, code)
	assert.Contains(t, empty.Logs(), "--metrics-cert-dir")
}
