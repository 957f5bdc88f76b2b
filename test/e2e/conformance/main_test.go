// Package conformance runs webhook-guard against real, widely used
// admission webhooks, built from their own sources through the Go module
// proxy: a controller-runtime webhook as kubebuilder scaffolds it
// (./crwebhook) and cert-manager's admission chain
// (hack/conformance/cert-manager). For each, in both kinds it registers,
// healthy traffic through kube-apiserver opens nothing, an outage (the
// process stopped with SIGSTOP) opens, recovery (SIGCONT) closes, and the
// configurations end byte-identical to before apart from resourceVersion
// and generation. It has its own control plane so that it runs in
// parallel with the other e2e packages.
package conformance

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// env is the control plane the tests of this package share; each test
// has its own namespace, configuration names and guard instance.
var env *harness.Env

func TestMain(m *testing.M) {
	start := time.Now()
	var err error
	env, err = harness.Start(harness.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance: starting the control plane:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "conformance: control plane up in %s at %s\n", time.Since(start).Round(time.Millisecond), env.Config.Host)
	code := m.Run()
	env.Stop()
	os.Exit(code)
}
