package probe

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/time/rate"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// countingServer is a TLS webhook on a fixed listener that counts the
// connections it accepted.
type countingServer struct {
	srv   *httptest.Server
	conns atomic.Int64
}

func startCounting(t *testing.T, ca *testCA, l net.Listener, h http.HandlerFunc) *countingServer {
	t.Helper()
	cs := &countingServer{}
	cs.srv = httptest.NewUnstartedServer(h)
	cs.srv.Listener.Close()
	cs.srv.Listener = l
	cs.srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, nil, localhost)}}
	cs.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	cs.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			cs.conns.Add(1)
		}
	}
	cs.srv.StartTLS()
	return cs
}

// countingWebhook is a countingServer that answers GETs and reviews, the
// webhook that calls it, and a ConnectionPool; all end with the test.
func countingWebhook(t *testing.T) (*countingServer, admissionregistrationv1.MutatingWebhook, *ConnectionPool) {
	t.Helper()
	ca := newTestCA(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cs := startCounting(t, ca, l, getOrAnswer(t))
	t.Cleanup(cs.srv.Close)
	pool := &ConnectionPool{}
	t.Cleanup(pool.Close)
	return cs, urlWebhook(cs.srv.URL+"/mutate", ca.pem), pool
}

// healthz is the HTTPGet probe the pool tests send: the ConnectionPool
// serves HTTPGet probes only; AdmissionReview probes go through
// kube-apiserver's own client, which keeps its own connections.
var healthz = Spec{Kind: KindHTTPGet, Path: "/healthz"}

// getOrAnswer answers a GET with 200 "ok" and an AdmissionReview as
// answer does. (The body matters with Redial = 1ns: net/http puts a
// connection whose answer has no body back in the idle pool before it
// hands the answer over, and an IdleConnTimeout of 1ns may close it in
// between.)
func getOrAnswer(t testing.TB) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, "ok")
			return
		}
		answer(t, nil)(w, r)
	}
}

func TestConnectionPool_reusesOneConnectionAndRedials(t *testing.T) {
	// Registered first, so checked last: after the server and the pool
	// are closed.
	current := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, current) })
	cs, wh, pool := countingWebhook(t)
	p := &Prober{Discovery: testDiscovery(), Pool: pool}
	for range 20 {
		require.Equal(t, OutcomeHealthy, p.Probe(context.Background(), wh, healthz).Outcome)
	}
	assert.Equal(t, int64(1), cs.conns.Load(), "20 probes, one connection, as the apiserver keeps it")
	pool.mu.Lock()
	for _, e := range pool.entries {
		assert.Equal(t, connBuffers, bufferSizes{read: e.tr.ReadBufferSize, write: e.tr.WriteBufferSize}, "the probe's connection buffers")
	}
	assert.Len(t, pool.entries, 1)
	pool.mu.Unlock()

	pool.Redial = time.Nanosecond
	for range 3 {
		res := p.Probe(context.Background(), wh, healthz)
		require.Equal(t, OutcomeHealthy, res.Outcome, "%v", res.Err)
	}
	assert.Equal(t, int64(4), cs.conns.Load(), "past Redial every probe dials again")
}

// AdmissionReview probes keep one connection too, without a Pool:
// kube-apiserver's client (one per clientConfig, kept by the Prober) keeps
// its connections alive.
func TestProber_Probe_admissionReviewKeepsItsConnection(t *testing.T) {
	ca := newTestCA(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cs := startCounting(t, ca, l, answer(t, nil))
	defer cs.srv.Close()
	wh := urlWebhook(cs.srv.URL+"/mutate", ca.pem)
	p := &Prober{Discovery: testDiscovery()}
	for range 20 {
		res := p.Probe(context.Background(), wh, Spec{})
		require.Equal(t, OutcomeHealthy, res.Outcome, "%v", res.Err)
	}
	assert.Equal(t, int64(1), cs.conns.Load(), "20 probes, one connection")
}

// A restarted server closed the pooled connection: the probe dials again
// within the same probe and is healthy. A dead server is refused, not
// hidden behind the pool.
func TestConnectionPool_aClosedPooledConnectionIsRedialledWithinTheProbe(t *testing.T) {
	ca := newTestCA(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	first := startCounting(t, ca, l, getOrAnswer(t))
	wh := urlWebhook(first.srv.URL+"/mutate", ca.pem)
	pool := &ConnectionPool{}
	defer pool.Close()
	p := &Prober{Discovery: testDiscovery(), Pool: pool}
	require.Equal(t, OutcomeHealthy, p.Probe(context.Background(), wh, healthz).Outcome)

	first.srv.CloseClientConnections()
	first.srv.Close()
	l2, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	second := startCounting(t, ca, l2, getOrAnswer(t))
	res := p.Probe(context.Background(), wh, healthz)
	assert.Equal(t, OutcomeHealthy, res.Outcome, "%v", res.Err)
	assert.Equal(t, int64(1), second.conns.Load())

	second.srv.CloseClientConnections()
	second.srv.Close()
	res = p.Probe(context.Background(), wh, healthz)
	require.Equal(t, OutcomeFailed, res.Outcome)
	assert.Equal(t, ReasonRefused, res.Reason, "a dead server is refused, pooled connection or not: %v", res.Err)
}

func TestConnectionPool_aHungServerStillTimesOut(t *testing.T) {
	ca := newTestCA(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var hang atomic.Bool
	cs := startCounting(t, ca, l, func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
			return
		}
		getOrAnswer(t)(w, r)
	})
	defer cs.srv.Close()
	wh := urlWebhook(cs.srv.URL+"/mutate", ca.pem)
	pool := &ConnectionPool{}
	defer pool.Close()
	p := &Prober{Discovery: testDiscovery(), Pool: pool}
	require.Equal(t, OutcomeHealthy, p.Probe(context.Background(), wh, healthz).Outcome)
	hang.Store(true)
	spec := healthz
	spec.Timeout = 200 * time.Millisecond
	res := p.Probe(context.Background(), wh, spec)
	require.Equal(t, OutcomeFailed, res.Outcome)
	assert.Equal(t, ReasonTimeout, res.Reason)
}

// dropSecondRequest is a webhook that drops a kept-alive connection when
// the next request arrives on it (as a server shutting down, or an idle
// timeout crossing the request, does), and answers the first request on
// every connection.
func dropSecondRequest(t *testing.T, ca *testCA) (cs *countingServer, drop *atomic.Bool, dropped *atomic.Int64) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	drop, dropped = &atomic.Bool{}, &atomic.Int64{}
	served := map[string]int{}
	var mu sync.Mutex
	cs = startCounting(t, ca, l, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n := served[r.RemoteAddr]
		served[r.RemoteAddr]++
		mu.Unlock()
		if drop.Load() && n > 0 {
			dropped.Add(1)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		getOrAnswer(t)(w, r)
	})
	t.Cleanup(cs.srv.Close)
	return cs, drop, dropped
}

// An HTTPGet probe whose pooled connection is dropped mid-request is sent
// again on a fresh connection and the webhook is healthy: the pool hides
// nothing, and blames nothing on it.
func TestConnectionPool_aPooledConnectionDroppedMidRequestIsRetriedOnce(t *testing.T) {
	ca := newTestCA(t)
	cs, drop, dropped := dropSecondRequest(t, ca)
	wh := urlWebhook(cs.srv.URL+"/mutate", ca.pem)
	pool := &ConnectionPool{}
	defer pool.Close()
	p := &Prober{Discovery: testDiscovery(), Pool: pool}
	require.Equal(t, OutcomeHealthy, p.Probe(context.Background(), wh, healthz).Outcome)
	drop.Store(true)
	res := p.Probe(context.Background(), wh, healthz)
	assert.Equal(t, OutcomeHealthy, res.Outcome, "%v", res.Err)
	assert.Equal(t, int64(1), dropped.Load(), "the pooled connection was dropped once")
	assert.Equal(t, int64(2), cs.conns.Load(), "and the probe dialled again")
}

// An AdmissionReview probe whose kept-alive connection is dropped after
// the request was sent is a failure, as kube-apiserver's call is: its
// client retries only a GET (Request.request's isErrRetryableFunc), and
// net/http does not resend a POST once it was written (a POST is not
// replayable). The next probe dials again and is healthy.
func TestProber_Probe_admissionReviewDroppedMidRequestIsNotRetried(t *testing.T) {
	ca := newTestCA(t)
	cs, drop, dropped := dropSecondRequest(t, ca)
	wh := urlWebhook(cs.srv.URL+"/mutate", ca.pem)
	p := &Prober{Discovery: testDiscovery()}
	require.Equal(t, OutcomeHealthy, p.Probe(context.Background(), wh, Spec{}).Outcome)
	drop.Store(true)
	res := p.Probe(context.Background(), wh, Spec{})
	require.Equal(t, OutcomeFailed, res.Outcome, "%v", res.Err)
	assert.Equal(t, ReasonRefused, res.Reason, "%v", res.Err)
	assert.Equal(t, int64(1), dropped.Load(), "the kept connection was dropped once")
	assert.Equal(t, int64(1), cs.conns.Load(), "and the probe was not sent again")

	res = p.Probe(context.Background(), wh, Spec{})
	assert.Equal(t, OutcomeHealthy, res.Outcome, "%v", res.Err)
	assert.Equal(t, int64(2), cs.conns.Load(), "the next probe dialled again")
}

// BenchmarkProber_Probe_httpGetPooled is BenchmarkProber_Probe_httpGet on
// a kept-alive connection (ConnectionPool), as the service probes, and as
// BenchmarkProber_Probe_admissionReview keeps its connection. Run them
// side by side.
func BenchmarkProber_Probe_httpGetPooled(b *testing.B) {
	wh, _ := localWebhook(b, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	pool := &ConnectionPool{}
	defer pool.Close()
	p := &Prober{Discovery: testDiscovery(), Pool: pool}
	ctx := context.Background()
	for b.Loop() {
		if res := p.Probe(ctx, wh, healthz); res.Outcome != OutcomeHealthy {
			b.Fatalf("probe not healthy: %v", res.Err)
		}
	}
}

// A probe of an open circuit (Spec.Recovery) dials a new connection only
// with a token of RecoveryDials: without one it is Unknown and reaches no
// server. On a kept-alive connection it needs none, and a probe of a
// closed circuit never waits for one. Both clients: the pool's (HTTPGet)
// and kube-apiserver's (AdmissionReview).
func TestProber_Probe_recoveryProbesDialWithinTheBudget(t *testing.T) {
	for _, kind := range []Kind{KindHTTPGet, KindAdmissionReview} {
		t.Run(string(kind), func(t *testing.T) {
			cs, wh, pool := countingWebhook(t)
			// One token, never refilled.
			p := &Prober{Discovery: testDiscovery(), Pool: pool, RecoveryDials: rate.NewLimiter(0, 1)}
			recovery := Spec{Kind: kind, Path: "/healthz", Recovery: true}

			for range 5 {
				res := p.Probe(context.Background(), wh, recovery)
				require.Equal(t, OutcomeHealthy, res.Outcome, "%v", res.Err)
			}
			require.Equal(t, int64(1), cs.conns.Load(), "the token's connection, then kept alive")

			cs.srv.CloseClientConnections()
			// Until the client sees the close, a probe may still be sent
			// on the closed connection (an EOF, as kube-apiserver's client
			// would get); then none is sent.
			var res Result
			require.Eventually(t, func() bool {
				res = p.Probe(context.Background(), wh, recovery)
				return res.Outcome == OutcomeUnknown
			}, 5*time.Second, time.Millisecond, "%v", res.Err)
			require.ErrorIs(t, res.Err, ErrRecoveryDialBudget)
			require.Equal(t, int64(1), cs.conns.Load(), "no token, no dial")

			closed := recovery
			closed.Recovery = false
			res = p.Probe(context.Background(), wh, closed)
			require.Equal(t, OutcomeHealthy, res.Outcome, "%v", res.Err)
			require.Equal(t, int64(2), cs.conns.Load(), "a closed circuit's probe dials without a token")
		})
	}
}
