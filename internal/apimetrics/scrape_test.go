package apimetrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// metricsServer serves text at /metrics and records the last request.
func metricsServer(t *testing.T, serve func(w http.ResponseWriter, r *http.Request)) (*Scraper, func() *http.Request) {
	t.Helper()
	var last *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last = r.Clone(context.Background())
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		serve(w, r)
	}))
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	require.NoError(t, err)
	return &Scraper{Client: cs.Discovery().RESTClient()}, func() *http.Request { return last }
}

func TestScraper_Scrape_asksForTheWantedFamiliesOnly(t *testing.T) {
	text := exposition(1, 10, 2, 0, 0)
	s, last := metricsServer(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(text))
	})
	got, err := s.Scrape(context.Background(), map[Webhook]bool{mut: true})
	require.NoError(t, err)
	assert.Equal(t, Counters{Calls: 10, CallErrors: 2, Series: 6}, got.Webhooks[mut])
	req := last()
	assert.Equal(t, "gzip", req.Header.Get("Accept-Encoding"), "net/http's own: identity costs the guard more and saves the apiserver nothing measurable")
	assert.ElementsMatch(t, Families(ParseOptions{}), req.URL.Query()["name[]"])

	s.Latency = true
	_, err = s.Scrape(context.Background(), map[Webhook]bool{mut: true})
	require.NoError(t, err)
	assert.Contains(t, last().URL.Query()["name[]"], AdmissionDuration)
}

func TestScraper_Scrape_anApiserverThatIgnoresNameServesEverythingAndStillParses(t *testing.T) {
	text := "# HELP apiserver_request_total x\n# TYPE apiserver_request_total counter\napiserver_request_total{verb=\"GET\"} 5\n" + exposition(7, 10, 0, 0, 0)
	s, _ := metricsServer(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(text))
	})
	got, err := s.Scrape(context.Background(), map[Webhook]bool{mut: true})
	require.NoError(t, err)
	assert.Equal(t, float64(7), got.Instance)
	assert.Equal(t, float64(10), got.Webhooks[mut].Calls)
	assert.Equal(t, int64(len(text)), got.Bytes)
}
