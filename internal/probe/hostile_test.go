package probe

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	admissionv1 "k8s.io/api/admission/v1"
)

// expiredLeaf issues a serving certificate for 127.0.0.1 that expired an
// hour ago.
func (ca *testCA) expiredLeaf(t testing.TB) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: "webhook"},
		NotBefore:    time.Now().Add(-2 * time.Hour),
		NotAfter:     time.Now().Add(-time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  localhost,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// streamTenMB answers with a 10 MB JSON body of spaces.
func streamTenMB(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	chunk := []byte(strings.Repeat(" ", 64<<10))
	for i := 0; i < 160; i++ {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// TestProber_Probe_hostileWebhooks: each hostile behaviour is classified
// the way kube-apiserver would see it, within the probe timeout, without
// reading an unbounded body, and without leaving a goroutine behind.
func TestProber_Probe_hostileWebhooks(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ca := newTestCA(t)
	serve := func(t *testing.T, h http.HandlerFunc) *httptest.Server {
		srv, _ := startTLS(t, ca.leaf(t, nil, localhost), h)
		return srv
	}
	cases := map[string]struct {
		start   func(t *testing.T) string // returns the URL
		outcome Outcome
		reason  FailureReason
	}{
		"slowloris headers, one byte every 100ms, are a timeout": {
			start: func(t *testing.T) string {
				l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, nil, localhost)}})
				require.NoError(t, err)
				done := make(chan struct{})
				t.Cleanup(func() { close(done); _ = l.Close() })
				go func() {
					for {
						conn, err := l.Accept()
						if err != nil {
							return
						}
						go func() {
							defer conn.Close()
							buf := make([]byte, 4096)
							_, _ = conn.Read(buf)
							for _, b := range []byte("HTTP/1.1 200 OK\r\nX-Slow: " + strings.Repeat("a", 1000)) {
								select {
								case <-done:
									return
								case <-time.After(100 * time.Millisecond):
								}
								if _, err := conn.Write([]byte{b}); err != nil {
									return
								}
							}
						}()
					}
				}()
				return "https://" + l.Addr().String() + "/mutate"
			},
			outcome: OutcomeFailed, reason: ReasonTimeout,
		},
		"a 10 MB body is a bad response, read only to its bound": {
			start: func(t *testing.T) string {
				return serve(t, streamTenMB).URL + "/mutate"
			},
			outcome: OutcomeFailed, reason: ReasonBadResponse,
		},
		"invalid JSON is a bad response": {
			start: func(t *testing.T) string {
				return serve(t, func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, `{"response": {"uid": `)
				}).URL + "/mutate"
			},
			outcome: OutcomeFailed, reason: ReasonBadResponse,
		},
		"the wrong apiVersion is a bad response": {
			start: func(t *testing.T) string {
				return serve(t, answer(t, func(r *admissionv1.AdmissionReview) { r.APIVersion = "admission.k8s.io/v1beta1" })).URL + "/mutate"
			},
			outcome: OutcomeFailed, reason: ReasonBadResponse,
		},
		"an HTTP/2-only server is healthy: kube-apiserver speaks HTTP/2 to webhooks too": {
			start: func(t *testing.T) string {
				srv := httptest.NewUnstartedServer(answer(t, nil))
				srv.EnableHTTP2 = true
				srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, nil, localhost)}, NextProtos: []string{"h2"}}
				srv.StartTLS()
				t.Cleanup(srv.Close)
				return srv.URL + "/mutate"
			},
			outcome: OutcomeHealthy,
		},
		"a redirect is an http-status failure": {
			start: func(t *testing.T) string {
				return serve(t, func(w http.ResponseWriter, r *http.Request) {
					http.Redirect(w, r, "https://127.0.0.1:1/elsewhere", http.StatusTemporaryRedirect)
				}).URL + "/mutate"
			},
			outcome: OutcomeFailed, reason: ReasonHTTPStatus,
		},
		"an expired certificate is a tls failure": {
			start: func(t *testing.T) string {
				srv, _ := startTLS(t, ca.expiredLeaf(t), answer(t, nil))
				return srv.URL + "/mutate"
			},
			outcome: OutcomeFailed, reason: ReasonTLS,
		},
		"the wrong SAN is a tls failure": {
			start: func(t *testing.T) string {
				srv, _ := startTLS(t, ca.leaf(t, []string{"other.example.com"}, nil), answer(t, nil))
				return srv.URL + "/mutate"
			},
			outcome: OutcomeFailed, reason: ReasonTLS,
		},
		"an unknown CA is a tls failure": {
			start: func(t *testing.T) string {
				srv, _ := startTLS(t, newTestCA(t).leaf(t, nil, localhost), answer(t, nil))
				return srv.URL + "/mutate"
			},
			outcome: OutcomeFailed, reason: ReasonTLS,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			url := tc.start(t)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			res := (&Prober{Mapper: testMapper()}).Probe(t.Context(), urlWebhook(url, ca.pem), Spec{Timeout: 500 * time.Millisecond})
			runtime.ReadMemStats(&after)
			assert.Equal(t, tc.outcome, res.Outcome, "err: %v", res.Err)
			assert.Equal(t, tc.reason, res.Reason, "err: %v", res.Err)
			// Whatever the server sends, one probe allocates a few MiB at
			// most: the body bound is 1 MiB.
			assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(8<<20), "one probe allocated %d bytes", after.TotalAlloc-before.TotalAlloc)
		})
	}
}

// TestProber_Probe_manyHostileTargetsAtOnce: 100 probes at once, each
// against a server that streams 10 MB, keep the heap bounded: the bound on
// what one probe reads holds under concurrency.
func TestProber_Probe_manyHostileTargetsAtOnce(t *testing.T) {
	before := goleak.IgnoreCurrent()
	ca := newTestCA(t)
	srv, _ := startTLS(t, ca.leaf(t, nil, localhost), streamTenMB)
	const probes = 100
	p := &Prober{Mapper: testMapper()}
	wh := urlWebhook(srv.URL+"/mutate", ca.pem)

	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	results := make(chan Result, probes)
	for i := 0; i < probes; i++ {
		go func() { results <- p.Probe(t.Context(), wh, Spec{Timeout: 5 * time.Second}) }()
	}
	for i := 0; i < probes; i++ {
		res := <-results
		assert.Equal(t, ReasonBadResponse, res.Reason, "err: %v", res.Err)
	}
	close(stop)
	<-sampled
	grew := int64(peak.Load()) - int64(base.HeapInuse)
	t.Logf("%d concurrent probes of 10 MB bodies: heap in use grew by at most %d MiB", probes, grew>>20)
	// 1 MiB read per probe, plus TLS and HTTP buffers: well under the 1 GiB
	// that 100 unbounded 10 MB reads would take.
	assert.Less(t, grew, int64(probes*3<<20), "the heap grew by %d bytes", grew)
	srv.Close()
	goleak.VerifyNone(t, before)
}
