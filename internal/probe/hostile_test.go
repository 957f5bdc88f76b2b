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

// streamForever answers with an endless JSON body of spaces, until the
// client hangs up: only a bounded read ends it before the probe's timeout.
func streamForever(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	chunk := []byte(strings.Repeat(" ", 64<<10))
	for {
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
		timeout time.Duration             // 500ms when zero
		alloc   uint64                    // 8 MiB when zero
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
		"an endless body is a bad response, read only to its bound": {
			start: func(t *testing.T) string {
				return serve(t, streamForever).URL + "/mutate"
			},
			// Reading MaxResponseBytes takes a while on a busy machine;
			// an unbounded read would take until the timeout.
			timeout: 10 * time.Second,
			// client-go reads the body into one slice (transformResponse's
			// io.ReadAll), so a probe allocates about twice the bound.
			alloc:   3 * MaxResponseBytes,
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
		// kube-apiserver's webhook client is a plain http.Client
		// (rest.HTTPClientFor sets no CheckRedirect), so it follows a
		// redirect, keeping POST and body for a 307, and fails as the
		// target does.
		"a redirect is followed: to a closed port, refused": {
			start: func(t *testing.T) string {
				return serve(t, func(w http.ResponseWriter, r *http.Request) {
					http.Redirect(w, r, "https://127.0.0.1:1/elsewhere", http.StatusTemporaryRedirect)
				}).URL + "/mutate"
			},
			outcome: OutcomeFailed, reason: ReasonRefused,
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
			timeout, alloc := tc.timeout, tc.alloc
			if timeout == 0 {
				timeout = 500 * time.Millisecond
			}
			if alloc == 0 {
				alloc = 8 << 20
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			res := (&Prober{Discovery: testDiscovery()}).Probe(t.Context(), urlWebhook(url, ca.pem), Spec{Timeout: timeout})
			runtime.ReadMemStats(&after)
			assert.Equal(t, tc.outcome, res.Outcome, "err: %v", res.Err)
			assert.Equal(t, tc.reason, res.Reason, "err: %v", res.Err)
			// Whatever the server sends, one probe allocates a few MiB, or
			// about twice MaxResponseBytes for an endless body.
			assert.Less(t, after.TotalAlloc-before.TotalAlloc, alloc, "one probe allocated %d bytes", after.TotalAlloc-before.TotalAlloc)
		})
	}
}

// TestProber_Probe_manyHostileTargetsAtOnce: probes at once, each against
// a server that streams without end, keep the heap bounded: the bound on
// what one probe reads holds under concurrency. (A few probes only: each
// reads MaxResponseBytes, and the machine running the tests is small.)
func TestProber_Probe_manyHostileTargetsAtOnce(t *testing.T) {
	before := goleak.IgnoreCurrent()
	ca := newTestCA(t)
	srv, _ := startTLS(t, ca.leaf(t, nil, localhost), streamForever)
	const probes = 8
	p := &Prober{Discovery: testDiscovery()}
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
		go func() { results <- p.Probe(t.Context(), wh, Spec{Timeout: 30 * time.Second}) }()
	}
	for i := 0; i < probes; i++ {
		res := <-results
		assert.Equal(t, ReasonBadResponse, res.Reason, "err: %v", res.Err)
	}
	close(stop)
	<-sampled
	grew := int64(peak.Load()) - int64(base.HeapInuse)
	t.Logf("%d concurrent probes of endless bodies: heap in use grew by at most %d MiB", probes, grew>>20)
	// MaxResponseBytes read per probe into one growing slice, plus TLS and
	// HTTP buffers; unbounded reads would not have ended at all.
	assert.Less(t, grew, int64(probes*3*MaxResponseBytes), "the heap grew by %d bytes", grew)
	srv.Close()
	goleak.VerifyNone(t, before)
}
