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
func (s *Scraper) Scrape(ctx context.Context, want map[Webhook]bool) (Sample, error) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := s.Client.Get().AbsPath("/metrics").
		SetHeader("Accept", "text/plain;version=0.0.4").
		Stream(ctx)
	if err != nil {
		return Sample{}, fmt.Errorf("reading the apiserver's /metrics: %w", err)
	}
	defer func() { _ = body.Close() }()
	return Read(body, want, ParseOptions{Latency: s.Latency})
}
