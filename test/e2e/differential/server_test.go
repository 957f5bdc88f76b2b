package differential

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/webhook-guard/webhook-guard/certs"
)

// Listener names: every variant is served on main, whose certificate is
// valid for 127.0.0.1 and signed by the CA in every caBundle, except the
// TLS variants, each served on a listener of its own.
const (
	listenMain      = "main"
	listenWrongCA   = "wrong-ca"
	listenExpired   = "expired"
	listenWrongName = "wrong-name"
)

// redirectTarget is where the redirect variants send the caller: a path
// that answers a POSTed AdmissionReview with allowed: true, and anything
// else (such as the bodiless GET a client makes after a 302) with 400.
const redirectTarget = "/redirect-target"

// variantServer is the webhook under test: one path per variant and kind
// ("/<variant>/<kind>"), on four TLS listeners on loopback. It counts,
// per path, the AdmissionReviews that are not dry runs: the calls
// kube-apiserver makes for the test's ConfigMaps (the probe's are dry runs).
type variantServer struct {
	// CA signed main's certificate; its PEM is every caBundle.
	CA *certs.CA

	variants  map[string]variant
	servers   []*http.Server
	listeners map[string]net.Listener

	mu    sync.Mutex
	calls map[string]int
	// redirected counts the requests to redirectTarget by method.
	redirected map[string]int
}

func startVariantServer(variants []variant) (*variantServer, error) {
	s := &variantServer{variants: map[string]variant{}, listeners: map[string]net.Listener{}, calls: map[string]int{}, redirected: map[string]int{}}
	for _, v := range variants {
		s.variants[v.name] = v
	}
	var err error
	if s.CA, err = certs.NewCA("differential-ca", 24*time.Hour); err != nil {
		return nil, err
	}
	otherCA, err := certs.NewCA("differential-other-ca", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	pairs := map[string]func() (certs.Pair, error){
		listenMain: func() (certs.Pair, error) { return s.CA.Issue([]string{"localhost"}, loopback, 24*time.Hour) },
		// Valid for the host, but from a CA that no caBundle holds.
		listenWrongCA: func() (certs.Pair, error) { return otherCA.Issue([]string{"localhost"}, loopback, 24*time.Hour) },
		// From the right CA and for the host, but it expired 30 s ago
		// (valid from a minute ago for -30 s).
		listenExpired: func() (certs.Pair, error) { return s.CA.Issue([]string{"localhost"}, loopback, -30*time.Second) },
		// From the right CA and valid, but for another name only.
		listenWrongName: func() (certs.Pair, error) { return s.CA.Issue([]string{"wrong-name.invalid"}, nil, 24*time.Hour) },
	}
	for name, issue := range pairs {
		pair, err := issue()
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("issuing the %s certificate: %w", name, err)
		}
		cert, err := pair.TLSCertificate()
		if err != nil {
			s.Close()
			return nil, err
		}
		l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		if err != nil {
			s.Close()
			return nil, err
		}
		srv := &http.Server{
			Handler:           s,
			ReadHeaderTimeout: 10 * time.Second,
			// The TLS variants fail handshakes on purpose.
			ErrorLog: log.New(io.Discard, "", 0),
		}
		s.listeners[name], s.servers = l, append(s.servers, srv)
		go func() { _ = srv.Serve(l) }()
	}
	return s, nil
}

// URL is the url clientConfig of variant v for kind k.
func (s *variantServer) URL(v variant, k hookKind) string {
	listener := v.listener
	if listener == "" {
		listener = listenMain
	}
	return fmt.Sprintf("https://%s/%s/%s", s.listeners[listener].Addr(), v.name, k)
}

// APIServerCalls is how many non-dry-run AdmissionReviews path received.
func (s *variantServer) APIServerCalls(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[path]
}

func (s *variantServer) Close() {
	for _, srv := range s.servers {
		_ = srv.Close()
	}
}

// Redirected is how many requests, by method, reached redirectTarget.
func (s *variantServer) Redirected() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.redirected)
}

func (s *variantServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == redirectTarget {
		s.mu.Lock()
		s.redirected[r.Method]++
		s.mu.Unlock()
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var review admissionv1.AdmissionReview
	if err == nil && r.Method == http.MethodPost {
		err = json.Unmarshal(body, &review)
	}
	if err != nil || r.Method != http.MethodPost || review.Request == nil {
		// What a webhook server does with a request that carries no
		// AdmissionReview (such as the GET a client sends after a 302).
		http.Error(w, "expected a POSTed AdmissionReview request", http.StatusBadRequest)
		return
	}
	if review.Request.DryRun == nil || !*review.Request.DryRun {
		s.mu.Lock()
		s.calls[r.URL.Path]++
		s.mu.Unlock()
	}
	if r.URL.Path == redirectTarget {
		okReply(allowed(review.Request)).write(w)
		return
	}
	name, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	v, ok := s.variants[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if v.delay > 0 {
		select {
		case <-time.After(v.delay):
		case <-r.Context().Done():
			return
		}
	}
	v.answer(review.Request).write(w)
}
