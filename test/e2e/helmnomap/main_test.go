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
	"os/exec"
	"path/filepath"
	"strings"
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
	env, err = harness.Start(harness.Options{APIServerFlags: map[string]string{
		// MutatingAdmissionPolicy off, API and admission plugin (which
		// would wait for informers of the API and keep the apiserver from
		// becoming ready), as on a cluster before 1.36.
		"runtime-config":            "admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false,admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings=false",
		"disable-admission-plugins": "MutatingAdmissionPolicy",
	}})
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
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, helmBin, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+env.KubeconfigPath,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return helmResult{stdout: stdout.String(), stderr: stderr.String(), err: err}
}
