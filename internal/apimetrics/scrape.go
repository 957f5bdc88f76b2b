package apimetrics

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
)

// Scraper reads kube-apiserver's /metrics through the service's own
// client: RBAC get on the non-resource URL /metrics, nothing more.
type Scraper struct {
	// Client is a REST client for the apiserver (a clientset's
	// Discovery().RESTClient()).
	Client rest.Interface
	// Timeout bounds one scrape. Default 5s.
	Timeout time.Duration
	// Latency also reads the webhooks' latency histograms (Sample.Latency).
	Latency bool
}

// DefaultScrapeTimeout bounds a scrape when Scraper.Timeout is zero.
const DefaultScrapeTimeout = 5 * time.Second

// Scrape reads the apiserver's metrics once and returns the counters of
// the webhooks in want. A Forbidden error means the RBAC is missing.
//
// It asks for the families it parses only (name[] of Families, which
// promhttp serves since client_golang v1.24, in kube-apiserver v1.37; an
// older apiserver ignores the parameter and serves everything, which Read
// filters all the same). That saves the apiserver writing and compressing
// every other family (29 MB of text with 200 CRDs, against 153 KB with
// 1,000 webhooks in the cluster); it cannot save the apiserver gathering
// them, which is most of what a scrape still costs it (hack/bench,
// section scrape). The answer stays gzip, as net/http asks by itself:
// identity costs the guard more and saves the apiserver nothing it can
// measure.
func (s *Scraper) Scrape(ctx context.Context, want map[Webhook]bool) (Sample, error) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	opts := ParseOptions{Latency: s.Latency}
	req := s.Client.Get().AbsPath("/metrics").
		SetHeader("Accept", "text/plain;version=0.0.4")
	for _, name := range Families(opts) {
		req = req.Param("name[]", name)
	}
	body, err := req.Stream(ctx)
	if err != nil {
		return Sample{}, fmt.Errorf("reading the apiserver's /metrics: %w", err)
	}
	defer func() { _ = body.Close() }()
	return Read(body, want, opts)
}
