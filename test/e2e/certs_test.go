package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/certs"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// servedSerial dials one of the guard's TLS ports (the webhook's, the
// metrics endpoint's) and returns the serial of the certificate it serves,
// verified against the CA in the Secret for the Service's name, as
// kube-apiserver verifies the webhook and Prometheus, with the chart's
// ServiceMonitor, the metrics endpoint.
func servedSerial(addr, serverName string, ca []byte) (string, error) {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// The self-managed certificate, as components/static-admission runs it:
// created once, reused by a restarted guard, and rotated before expiry
// while the webhook keeps serving. The metrics endpoint serves the same
// certificate (--metrics-cert-dir is the webhook's cert dir): a real TLS
// handshake verifies it against the Secret's CA for the Service's name,
// before and after the rotation.
func TestCerts_selfManagedSecretIsReusedAndRotatedWithoutRestart(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Ignore"})
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "webhook-guard-certs"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "update"}, ResourceNames: []string{certs.DefaultSecretName}},
	}}
	require.NoError(t, env.Client.Create(ctx, role))
	require.NoError(t, env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "webhook-guard-certs"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: s.ns, Name: "webhook-guard"}},
	}))

	addr, metricsAddr := freeAddr(t), freeAddr(t)
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	serverName := "webhook-guard." + s.ns + ".svc"
	args := func(extra ...string) []string {
		certDir := t.TempDir()
		return append([]string{"--webhook-cert-dir", certDir, "--webhook-host", host, "--webhook-port", port,
			"--cert-namespace", s.ns, "--cert-service-name", "webhook-guard",
			"--metrics-bind-address", metricsAddr, "--metrics-cert-dir", certDir}, extra...)
	}
	secret := func() *corev1.Secret {
		sec := &corev1.Secret{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: certs.DefaultSecretName}, sec))
		return sec
	}
	serving := func(g *harness.Guard, ca []byte) string {
		var serial string
		require.Eventually(t, func() bool {
			serial, err = servedSerial(addr, serverName, ca)
			return err == nil
		}, transition, 50*time.Millisecond, "the guard never served a certificate valid for %s: %v", serverName, err)
		return serial
	}

	first := s.startGuard("first", args()...)
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: certs.DefaultSecretName}, &corev1.Secret{}) == nil
	}, transition, 50*time.Millisecond, "the certificate Secret was never created")
	created := secret()
	assert.Equal(t, corev1.SecretTypeTLS, created.Type)
	serial := serving(first, created.Data[certs.CACertKey])
	metricsSerial := func(ca []byte) string {
		var serial string
		require.Eventually(t, func() bool {
			serial, err = servedSerial(metricsAddr, serverName, ca)
			return err == nil
		}, transition, 50*time.Millisecond, "the metrics endpoint never served a certificate of the Secret's CA valid for %s: %v", serverName, err)
		return serial
	}
	assert.Equal(t, serial, metricsSerial(created.Data[certs.CACertKey]), "the metrics endpoint serves the webhook's certificate")
	first.Stop()

	second := s.startGuard("second", args()...)
	assert.Equal(t, serial, serving(second, created.Data[certs.CACertKey]), "a restart must serve the certificate kept in the Secret")
	assert.Equal(t, created.ResourceVersion, secret().ResourceVersion, "a restart must not rewrite a valid Secret")
	second.Stop()

	// A rotation window 10 s shorter than the validity (90 days) makes
	// every certificate "near expiry" 10 s after it is issued.
	third := s.startGuard("third", args("--cert-rotate-before", "2159h59m50s", "--cert-check-interval", "500ms")...)
	before := serving(third, created.Data[certs.CACertKey])
	var after string
	require.Eventually(t, func() bool {
		after, err = servedSerial(addr, serverName, created.Data[certs.CACertKey])
		return err == nil && after != before
	}, time.Minute, 100*time.Millisecond, "the served certificate was never rotated")
	// Rotation goes on every 10 s here, so the metrics endpoint is only
	// required to move on from the first certificate, within the CA.
	require.Eventually(t, func() bool {
		got, err := servedSerial(metricsAddr, serverName, created.Data[certs.CACertKey])
		return err == nil && got != before
	}, time.Minute, 100*time.Millisecond, "the metrics endpoint never served a rotated certificate")
	exited, _ := third.Exited()
	assert.False(t, exited, "rotation must not need a restart")
	rotated := secret()
	assert.Equal(t, created.Data[certs.CACertKey], rotated.Data[certs.CACertKey], "rotation keeps the CA, so caBundles stay valid")
	assert.NotEqual(t, created.Data[corev1.TLSCertKey], rotated.Data[corev1.TLSCertKey])
	t.Logf("served serial %s, then %s after rotation, without a restart", before, after)
}
