// Package partition runs webhook-guard against a kube-apiserver whose
// "cluster" egress (every service-backed webhook call) goes through an
// HTTP CONNECT proxy the tests own, the stand-in for konnectivity. It has
// its own control plane because that apiserver is configured differently.
package partition

import (
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
	env, err = harness.Start(harness.Options{APIServerFlags: map[string]string{"egress-selector-config-file": cfg}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "partition: starting the control plane:", err)
		proxy.Close()
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "partition: control plane up in %s, cluster egress through %s\n", time.Since(start).Round(time.Millisecond), proxy.SocketPath)
	code := m.Run()
	env.Stop()
	proxy.Close()
	os.Exit(code)
}
