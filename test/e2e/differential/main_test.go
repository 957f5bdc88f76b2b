// Package differential holds the differential test of the guard's probe
// against kube-apiserver: one webhook server answers a
// table of response variants, and for each variant, mutating and
// validating, a real request through a real kube-apiserver and the
// guard's real probe must reach the same verdict. It has its own control
// plane so that it runs in parallel with the other e2e packages.
package differential

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// env is the control plane every row of the table is sent through.
var env *harness.Env

func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard())
	start := time.Now()
	var err error
	env, err = harness.Start(harness.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "differential: starting the control plane:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "differential: control plane up in %s at %s\n", time.Since(start).Round(time.Millisecond), env.Config.Host)
	code := m.Run()
	env.Stop()
	os.Exit(code)
}
