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

func TestConnectionPool_reusesOneConnectionAndRedials(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ca := newTestCA(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cs := startCounting(t, ca, l, answer(t, nil))
	defer cs.srv.Close()
	wh := urlWebhook(cs.srv.URL+"/mutate", ca.pem)

	pool := &ConnectionPool{}
	defer pool.Close()
	p := &Prober{Mapper: testMapper(), Pool: pool}
	for range 20 {
		require.Equal(t, OutcomeHealthy, p.Probe(context.Background(), wh, Spec{}).Outcome)
	}
	assert.Equal(t, int64(1), cs.conns.Load(), "20 probes, one connection, as the apiserver keeps it")

	pool.Redial = time.Nanosecond
	for range 3 {
		require.Equal(t, OutcomeHealthy, p.Probe(context.Background(), wh, Spec{}).Outcome)
	}
	assert.Equal(t, int64(4), cs.conns.Load(), "past Redial every probe dials again")
}

// A restarted server closed the pooled connection: the probe dials again
// within the same probe and is healthy. A dead server is refused, not
// hidden behind the pool.
func TestConnectionPool_aClosedPooledConnectionIsRedialledWithinTheProbe(t *testing.T) {
	ca := newTestCA(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	first := startCounting(t, ca, l, answer(t, nil))
	wh := urlWebhook(first.srv.URL+"/mutate", ca.pem)
	pool := &ConnectionPool{}
	defer pool.Close()
	p := &Prober{Mapper: testMapper(), Pool: pool}
	require.Equal(t, OutcomeHealthy, p.Probe(context.Background(), wh, Spec{}).Outcome)

	first.srv.CloseClientConnections()
	first.srv.Close()
	l2, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	second := startCounting(t, ca, l2, answer(t, nil))
	res := p.Probe(context.Background(), wh, Spec{})
	assert.Equal(t, OutcomeHealthy, res.Outcome, "%v", res.Err)
	assert.Equal(t, int64(1), second.conns.Load())

	second.srv.CloseClientConnections()
	second.srv.Close()
	res = p.Probe(context.Background(), wh, Spec{})
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
		answer(t, nil)(w, r)
	})
	defer cs.srv.Close()
	wh := urlWebhook(cs.srv.URL+"/mutate", ca.pem)
	pool := &ConnectionPool{}
	defer pool.Close()
	p := &Prober{Mapper: testMapper(), Pool: pool}
	require.Equal(t, OutcomeHealthy, p.Probe(context.Background(), wh, Spec{}).Outcome)
	hang.Store(true)
	res := p.Probe(context.Background(), wh, Spec{Timeout: 200 * time.Millisecond})
	require.Equal(t, OutcomeFailed, res.Outcome)
	assert.Equal(t, ReasonTimeout, res.Reason)
}

// The server drops a kept-alive connection when the next request arrives
// on it (as a server shutting down, or an idle timeout crossing the
// request, does). The probe is sent again on a fresh connection and the
// webhook is healthy: the pool hides nothing, and blames nothing on it.
func TestConnectionPool_aPooledConnectionDroppedMidRequestIsRetriedOnce(t *testing.T) {
	ca := newTestCA(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var drop atomic.Bool
	served := map[string]int{}
	var dropped atomic.Int64
	var mu sync.Mutex
	cs := startCounting(t, ca, l, func(w http.ResponseWriter, r *http.Request) {
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
		answer(t, nil)(w, r)
	})
	cs.srv.EnableHTTP2 = false
	defer cs.srv.Close()
	wh := urlWebhook(cs.srv.URL+"/mutate", ca.pem)
	pool := &ConnectionPool{}
	defer pool.Close()
	p := &Prober{Mapper: testMapper(), Pool: pool}
	require.Equal(t, OutcomeHealthy, p.Probe(context.Background(), wh, Spec{}).Outcome)
	drop.Store(true)
	res := p.Probe(context.Background(), wh, Spec{})
	assert.Equal(t, OutcomeHealthy, res.Outcome, "%v", res.Err)
	assert.Equal(t, int64(1), dropped.Load(), "the pooled connection was dropped once")
	assert.Equal(t, int64(2), cs.conns.Load(), "and the probe dialled again")
}

// BenchmarkProber_Probe_admissionReviewPooled is
// BenchmarkProber_Probe_admissionReview on a kept-alive connection
// (ConnectionPool), as the service probes. Run them side by side.
func BenchmarkProber_Probe_admissionReviewPooled(b *testing.B) {
	wh, _ := localWebhook(b, answer(b, nil))
	pool := &ConnectionPool{}
	defer pool.Close()
	p := &Prober{Mapper: testMapper(), Pool: pool}
	ctx := context.Background()
	for b.Loop() {
		if res := p.Probe(ctx, wh, Spec{}); res.Outcome != OutcomeHealthy {
			b.Fatalf("probe not healthy: %v", res.Err)
		}
	}
}
