package e2e

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/certs"
	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// binaryStatic is where the guard binary serves its webhook for the static
// manifest written before the apiserver started.
var binaryStatic struct {
	addr    string
	certDir string
}

const binaryStaticName = harness.StaticPrefix + "binary-guard"

// prepareBinaryStatic reserves an address and a serving certificate for
// the guard binary's webhook and renders the static manifest that points
// at it, as a control-plane operator would with "guard manifests static".
func prepareBinaryStatic() (map[string][]byte, error) {
	addr, err := harness.FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	binaryStatic.addr = addr
	ca, err := certs.NewCA("webhook-guard-e2e-static", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	pair, err := ca.Issue(nil, []net.IP{net.ParseIP("127.0.0.1")}, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	if binaryStatic.certDir, err = os.MkdirTemp("", "webhook-guard-static-certs-"); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(binaryStatic.certDir, "tls.crt"), pair.CertPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(binaryStatic.certDir, "tls.key"), pair.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	vwc := admission.RenderStaticWebhook("https://"+binaryStatic.addr+admission.WebhookPath, ca.CertPEM, admission.Options{
		Managed: map[string][]string{binaryStaticName: {"slow." + binaryStaticName + ".webhook-guard.io"}},
	})
	// The equivalence test's manifest already uses the product's name;
	// names must be unique across static manifests.
	vwc.Name = "webhook-guard-binary.static.k8s.io"
	data, err := admission.MarshalManifest(vwc)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{"webhook-guard-binary.yaml": data}, nil
}

// removeBinaryStatic removes the serving certificate and key that
// prepareBinaryStatic wrote.
func removeBinaryStatic() {
	if binaryStatic.certDir != "" {
		_ = os.RemoveAll(binaryStatic.certDir)
	}
}

// Enforcement point 2 with the real binary: its webhook, registered only
// through a static manifest, refuses an administrator's edit of an open
// circuit with the Go rule's message. No ValidatingAdmissionPolicy is
// installed here (the guard writes none), so no policy covers this
// configuration and the refusal can only come from the static webhook.
func TestGuard_staticWebhookServedByTheBinaryEnforcesTheRule(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Ignore", kubectl: true, name: binaryStaticName})
	for _, obj := range []client.Object{
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: admission.PolicyName}},
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: admission.PolicyName}},
	} {
		if err := env.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			require.NoError(t, err)
		}
	}
	host, port, err := net.SplitHostPort(binaryStatic.addr)
	require.NoError(t, err)
	metricsAddr := freeAddr(t)
	env.StartGuardT(t, harness.GuardOptions{Name: "guard", Kubeconfig: s.guardID.KubeconfigPath, Config: s.config(""), WithoutPolicy: true,
		Args: []string{"--leader-elect", "--leader-election-namespace", s.ns,
			"--webhook-cert-dir", binaryStatic.certDir, "--webhook-host", host, "--webhook-port", port, "--cert-secret", "",
			"--metrics-bind-address", metricsAddr}})
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	_, open := s.waitOpen()
	openedAt := mustRecord(t, open)[s.hook].OpenedAt.UTC().Format(time.RFC3339)

	var r harness.Result
	require.Eventually(t, func() bool {
		r = env.Kubectl(ctx, "", s.manifest, "apply", "--dry-run=server", "-f", "-")
		return r.Err != nil
	}, transition, 100*time.Millisecond, "the static webhook never refused the edit: %s", r.Stdout)
	r = env.Kubectl(ctx, "", s.manifest, "apply", "-f", "-")
	require.Error(t, r.Err)
	t.Logf("$ kubectl apply -f %s.yaml\n%s", s.name, r.Stderr)
	assert.Contains(t, r.Stderr, `admission webhook "`+admission.StaticWebhookEntryName+`" denied the request`)
	assert.NotContains(t, r.Stderr, "ValidatingAdmissionPolicy")
	assert.Contains(t, r.Stderr, "circuit open since "+openedAt)
	assert.Contains(t, r.Stderr, `kubectl annotate mutatingwebhookconfiguration `+s.name+` webhook-guard.io/override="<reason>"`)
	assert.True(t, isOpen(s.get(), s.hook, "Ignore"))

	// Both servers speak HTTP/1.1 only, even to a client that offers h2,
	// and refuse TLS older than 1.2.
	for name, addr := range map[string]string{"webhook": binaryStatic.addr, "metrics": metricsAddr} {
		var conn *tls.Conn
		require.Eventually(t, func() bool {
			conn, err = tls.Dial("tcp", addr, &tls.Config{NextProtos: []string{"h2", "http/1.1"}, InsecureSkipVerify: true}) //nolint:gosec // only the protocol is checked
			return err == nil
		}, transition, 50*time.Millisecond, "%s: no TLS: %v", name, err)
		assert.NotEqual(t, "h2", conn.ConnectionState().NegotiatedProtocol, "%s server negotiated HTTP/2", name)
		_ = conn.Close()
		_, err = tls.Dial("tcp", addr, &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11, InsecureSkipVerify: true}) //nolint:gosec // only the version is checked
		assert.Error(t, err, "%s server accepted TLS 1.1", name)
	}
}
