// Package partition runs webhook-guard against a kube-apiserver whose
// "cluster" egress (every service-backed webhook call) goes through an
// HTTP CONNECT proxy the tests own, the stand-in for konnectivity. It has
// its own control plane because that apiserver is configured differently.
// The same apiserver does not serve MutatingAdmissionPolicy, so the
// breaker runs here without marking.
package partition

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

var (
	env   *harness.Env
	proxy *harness.ConnectProxy
)

func TestMain(m *testing.M) {
	start := time.Now()
	var err error
	proxy, err = harness.StartConnectProxy()
	if err != nil {
		fmt.Fprintln(os.Stderr, "partition: starting the CONNECT proxy:", err)
		os.Exit(1)
	}
	cfg := filepath.Join(filepath.Dir(proxy.SocketPath), "egress-selector.yaml")
	if err := os.WriteFile(cfg, proxy.EgressSelectorConfiguration(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "partition:", err)
		os.Exit(1)
	}
	// An apiserver without MutatingAdmissionPolicy, as before 1.36 or with
	// the API turned off: the breaker must work without marking.
	env, err = harness.Start(harness.Options{APIServerFlags: harness.WithoutMutatingAdmissionPolicy(map[string]string{
		"egress-selector-config-file": cfg,
	})})
	if err != nil {
		fmt.Fprintln(os.Stderr, "partition: starting the control plane:", err)
		proxy.Close()
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "partition: control plane up in %s, cluster egress through %s\n", time.Since(start).Round(time.Millisecond), proxy.SocketPath)
	code := m.Run()
	if out := os.Getenv("WEBHOOK_GUARD_CAPTURE_METRICS"); out != "" {
		// The apiserver's /metrics after the tests' webhook traffic, for
		// internal/apimetrics' benchmark of the scrape's cost.
		if err := captureMetrics(out); err != nil {
			fmt.Fprintln(os.Stderr, "partition: capturing /metrics:", err)
			code = 1
		}
	}
	env.Stop()
	proxy.Close()
	os.Exit(code)
}

func captureMetrics(path string) error {
	body, err := env.Clientset.Discovery().RESTClient().Get().AbsPath("/metrics").
		SetHeader("Accept", "text/plain;version=0.0.4").DoRaw(context.Background())
	if err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o644)
}
