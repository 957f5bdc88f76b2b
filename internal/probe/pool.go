package probe

import (
	"crypto/sha256"
	"crypto/tls"
	"net/http"
	"sync"
	"time"
)

// DefaultRedial is how long a ConnectionPool keeps using one connection to
// a webhook before the next probe dials a new one. A fresh TCP and TLS
// handshake costs the guard about 1 ms of CPU, fifteen times a pooled
// probe: with 30 s, re-dials alone were a tenth of the guard's CPU at
// 1,000 targets; with 2 minutes, a Service's backends are still sampled
// many times an hour.
const DefaultRedial = 2 * time.Minute

// ConnectionPool keeps one connection per webhook endpoint between probes,
// as kube-apiserver's webhook client does (client-go's cached transports):
// a probe on a kept-alive connection is closer to the apiserver's
// experience, and costs a small part of a fresh TCP and TLS handshake.
//
//   - It re-dials every Redial, so that a Service with several backends is
//     sampled the way kube-proxy spreads new connections.
//   - It never hides a dead server: a probe whose pooled connection was
//     closed or reset is sent again on a fresh connection within the same
//     probe, and only that attempt counts. A hung server still times out.
//
// A ConnectionPool is safe for concurrent use. Close releases its idle
// connections.
type ConnectionPool struct {
	// Redial bounds the life of a pooled connection. Default DefaultRedial.
	Redial time.Duration

	mu      sync.Mutex
	entries map[string]*pooled
}

type pooled struct {
	tr       *http.Transport
	rootsKey [32]byte
	since    time.Time
}

// transport returns the pooled transport for ep, replacing it when its
// trust changed or it is older than Redial.
func (cp *ConnectionPool) transport(ep endpoint, rootsKey [32]byte) *http.Transport {
	redial := cp.Redial
	if redial <= 0 {
		redial = DefaultRedial
	}
	key := ep.url.Host + "|" + ep.serverName
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.entries == nil {
		cp.entries = map[string]*pooled{}
	}
	if e, ok := cp.entries[key]; ok {
		if e.rootsKey == rootsKey && time.Since(e.since) < redial {
			return e.tr
		}
		e.tr.CloseIdleConnections()
	}
	tr := &http.Transport{
		Proxy:       nil,
		DialContext: ep.dial,
		TLSClientConfig: &tls.Config{
			RootCAs:    ep.roots,
			ServerName: ep.serverName,
			MinVersion: tls.VersionTLS12,
		},
		MaxIdleConnsPerHost:    1,
		IdleConnTimeout:        redial,
		ForceAttemptHTTP2:      true,
		MaxResponseHeaderBytes: 1 << 20,
	}
	connBuffers.apply(tr)
	cp.entries[key] = &pooled{tr: tr, rootsKey: rootsKey, since: time.Now()}
	return tr
}

// Close closes every idle pooled connection and forgets the endpoints.
func (cp *ConnectionPool) Close() {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for k, e := range cp.entries {
		e.tr.CloseIdleConnections()
		delete(cp.entries, k)
	}
}

// rootsKeyOf identifies the trust of an endpoint: its caBundle, or the
// system roots when empty.
func rootsKeyOf(caBundle []byte) [32]byte { return sha256.Sum256(caBundle) }
