// Package helmnomap installs the Helm chart with the real helm on a
// kube-apiserver that does not serve MutatingAdmissionPolicy, as every
// cluster before Kubernetes 1.36 (here 1.37 with the API turned off by
// --runtime-config): the chart renders only what that apiserver serves,
// installs, and the real guard runs as the chart's ServiceAccount without
// marking. It has a control plane of its own, because test/e2e/helm's
// serves the API.
package helmnomap

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// env is this package's control plane; helmBin the helm binary; root the
// repository.
var (
	env     *harness.Env
	helmBin string
	root    string
)

// chartDir is the chart, from the repository root.
var chartDir = filepath.Join("deploy", "helm", "webhook-guard")

func TestMain(m *testing.M) {
	level := zapcore.Level(0)
	if os.Getenv("E2E_VERBOSE") != "" {
		level = -1
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr), zap.Level(level)))
	helmBin = os.Getenv("HELM")
	if helmBin == "" {
		fmt.Fprintln(os.Stderr, "e2e/helmnomap: HELM is not set: run make e2e, or HELM=\"$(hack/tools/helm.sh)\" go test ./test/e2e/helmnomap")
		os.Exit(1)
	}
	var err error
	if root, err = harness.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e/helmnomap:", err)
		os.Exit(1)
	}
	start := time.Now()
	env, err = harness.Start(harness.Options{APIServerFlags: harness.WithoutMutatingAdmissionPolicy(nil)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/helmnomap: starting the control plane:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "e2e/helmnomap: control plane up in %s at %s\n", time.Since(start).Round(time.Millisecond), env.Config.Host)
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// helmResult is one helm run.
type helmResult struct {
	stdout, stderr string
	err            error
}

// runHelm runs helm with the control plane's admin kubeconfig, from the
// repository root, in a helm home of the test's own.
func runHelm(t *testing.T, args ...string) helmResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := env.RunHelm(ctx, helmBin, root, t.TempDir(), args...)
	return helmResult{stdout: r.Stdout, stderr: r.Stderr, err: r.Err}
}
