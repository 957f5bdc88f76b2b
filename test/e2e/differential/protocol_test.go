package differential

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/webhook-guard/webhook-guard/certs"
	"github.com/webhook-guard/webhook-guard/internal/probe"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// The probe speaks to a webhook the HTTP version kube-apiserver speaks:
// it uses kube-apiserver's own webhook client (k8s.io/apiserver's
// pkg/util/webhook), which offers HTTP/2 only to a URL on localhost and
// HTTP/1.1 alone to a Service or any other host. Here, a URL on loopback
// whose server offers both, both use HTTP/2. Over HTTP/1.1 a request is
// cancelled only by closing its connection, so there every timed-out probe
// of a hanging webhook costs a new TCP and TLS handshake
// (docs/performance.md, where it falls short).
func TestProtocol_theProbeSpeaksTheHTTPVersionKubeAPIServerSpeaks(t *testing.T) {
	ctx := context.Background()
	ca, err := certs.NewCA("protocol-ca", time.Hour)
	require.NoError(t, err)
	pair, err := ca.Issue([]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	require.NoError(t, err)
	cert, err := pair.TLSCertificate()
	require.NoError(t, err)

	// protocols records the HTTP major version of each call, by caller:
	// the probe's reviews are dry runs, kube-apiserver's for a create are not.
	var mu sync.Mutex
	protocols := map[string][]int{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		review := admissionv1.AdmissionReview{}
		caller := "other"
		if json.NewDecoder(r.Body).Decode(&review) == nil && review.Request != nil {
			caller = "kube-apiserver"
			if review.Request.DryRun != nil && *review.Request.DryRun {
				caller = "probe"
			}
			review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
			review.Request = nil
		}
		mu.Lock()
		protocols[caller] = append(protocols[caller], r.ProtoMajor)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	// ServeTLS offers h2 and http/1.1 by ALPN.
	srv := &http.Server{Handler: handler, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	url := "https://" + l.Addr().String() + "/review"

	// The control: a client that offers HTTP/2 gets it.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}}
	resp, err := h2.Post(url, "application/json", nil)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, 2, resp.ProtoMajor, "the webhook server does not offer HTTP/2: the test shows nothing")

	ns := "protocol"
	require.NoError(t, env.EnsureNamespace(ctx, ns))
	wh := harness.ConfigMapWebhook("h2.protocol.webhook-guard.io", ns, url, ca.CertPEM, admissionregistrationv1.Fail)
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "differential-protocol"}, Webhooks: []admissionregistrationv1.MutatingWebhook{wh}}
	require.NoError(t, env.Client.Create(ctx, mwc))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), mwc) })

	called := func(caller string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(protocols[caller])
	}
	require.Eventually(t, func() bool {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "protocol-", Namespace: ns}}
		_ = env.Client.Create(ctx, cm)
		return called("kube-apiserver") > 0
	}, time.Minute, 200*time.Millisecond, "kube-apiserver never called the webhook")

	res := newProber().Probe(ctx, wh, probe.Spec{Timeout: 5 * time.Second})
	require.Equal(t, probe.OutcomeHealthy, res.Outcome, "%v", errors.Unwrap(res.Err))
	require.Positive(t, called("probe"))

	mu.Lock()
	defer mu.Unlock()
	for _, caller := range []string{"kube-apiserver", "probe"} {
		for _, major := range protocols[caller] {
			assert.Equal(t, 2, major, "%s called a localhost webhook that offers HTTP/2 over HTTP/%d", caller, major)
		}
	}
}
