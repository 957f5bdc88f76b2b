package harness

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/webhook-guard/webhook-guard/certs"
)

// TLSServer serves any http.Handler over TLS with a fresh CA, for tests
// that put a real admission handler (such as the product's) behind the
// apiserver instead of a scripted Behaviour.
type TLSServer struct {
	// CA signed the serving certificate.
	CA *certs.CA

	srv      *http.Server
	listener net.Listener
}

// StartTLSServer starts serving h on opts.Host (and opts.Port, 0 picks a
// free one) with a certificate for localhost, opts.Host and opts.DNSNames.
func StartTLSServer(opts WebhookOptions, h http.Handler) (*TLSServer, error) {
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	ca, err := certs.NewCA("webhook-guard-e2e-ca", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	pair, err := ca.Issue(append([]string{"localhost"}, opts.DNSNames...), []net.IP{net.ParseIP(opts.Host)}, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	cert, err := pair.TLSCertificate()
	if err != nil {
		return nil, err
	}
	l, err := tls.Listen("tcp", net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)), &tls.Config{
		Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
	})
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", opts.Host, err)
	}
	s := &TLSServer{CA: ca, listener: l}
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// Addr is host:port.
func (s *TLSServer) Addr() string { return s.listener.Addr().String() }

// URL is https://host:port/path.
func (s *TLSServer) URL(path string) string { return "https://" + s.Addr() + path }

// Close stops serving.
func (s *TLSServer) Close() { _ = s.srv.Close() }

// Port is the port it listens on.
func (s *TLSServer) Port() int { return s.listener.Addr().(*net.TCPAddr).Port }
