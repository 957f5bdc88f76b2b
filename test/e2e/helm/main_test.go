// Package helm tests the Helm chart deploy/helm/webhook-guard and "make
// release" with the real helm (hack/tools/helm.sh builds it; make e2e
// passes its path in HELM): the chart lints and renders cleanly, renders
// the objects the kustomize overlays install, refuses what the guard
// refuses, and installs and upgrades into a real kube-apiserver, where the
// real guard then runs as the chart's ServiceAccount with the chart's RBAC.
// The released chart is pushed to, and installed and pulled from, a real
// OCI registry on loopback (the distribution registry;
// hack/tools/registry.sh builds it; make e2e passes its path in REGISTRY).
// It has a control plane of its own, started in TestMain: the chart
// installs the same cluster-wide names as the kustomize overlays that
// package e2e applies.
package helm

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

// env is this package's control plane; helmBin the helm binary;
// registryBin the OCI registry's; root the repository.
var (
	env         *harness.Env
	helmBin     string
	registryBin string
	root        string
)

func TestMain(m *testing.M) {
	level := zapcore.Level(0)
	if os.Getenv("E2E_VERBOSE") != "" {
		level = -1
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr), zap.Level(level)))
	helmBin = os.Getenv("HELM")
	if helmBin == "" {
		fmt.Fprintln(os.Stderr, "e2e/helm: HELM is not set: run make e2e, or HELM=\"$(hack/tools/helm.sh)\" go test ./test/e2e/helm")
		os.Exit(1)
	}
	registryBin = os.Getenv("REGISTRY")
	if registryBin == "" {
		fmt.Fprintln(os.Stderr, "e2e/helm: REGISTRY is not set: run make e2e, or REGISTRY=\"$(hack/tools/registry.sh)\" go test ./test/e2e/helm")
		os.Exit(1)
	}
	var err error
	if root, err = harness.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e/helm:", err)
		os.Exit(1)
	}
	start := time.Now()
	env, err = harness.Start(harness.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/helm: starting the control plane:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "e2e/helm: control plane up in %s at %s\n", time.Since(start).Round(time.Millisecond), env.Config.Host)
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// The repository's paths these tests read.
var (
	chartDir       = filepath.Join("deploy", "helm", "webhook-guard")
	exampleTargets = filepath.Join("deploy", "kustomize", "components", "example-targets")
)

// exampleValues are the helm arguments that give the chart the example
// targets of the kustomize overlays: their config.yaml as a values file.
func exampleValues() []string {
	return []string{"-f", filepath.Join(root, exampleTargets, "config.yaml")}
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
