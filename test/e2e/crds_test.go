package e2e

// The CustomResourceDefinitions of the projects the overlays build on,
// installed from those projects' own sources so that the apiserver
// validates the overlays' objects against the real schemas. A fresh
// machine has only the Go module proxy: each source is a Go module,
// downloaded (and checked against the checksum database) by
// "go mod download" into the module cache, and read from there.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// prometheusOperatorModule is the prometheus-operator release whose
// ServiceMonitor and PrometheusRule CRDs the prometheus component is
// applied against. It is not a dependency of the project; this is the one
// place its version is recorded. (The module proxy serves no later
// version of the root module: later releases publish only sub-modules
// such as pkg/apis/monitoring, which carry no CRD files.)
const prometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

// certManagerModule is cert-manager at the version go.mod requires (the
// service imports its API types): "go mod download" without a version
// resolves it from go.mod, so the CRDs and the types cannot drift apart.
const certManagerModule = "github.com/cert-manager/cert-manager"

// crdSource is a set of CRD files in a Go module.
type crdSource struct {
	module string
	dir    string
	files  []string
	crds   []string // names, to wait for
}

var (
	certManagerCRDs = crdSource{
		module: certManagerModule,
		dir:    "deploy/crds",
		files:  []string{"cert-manager.io_issuers.yaml", "cert-manager.io_certificates.yaml"},
		crds:   []string{"issuers.cert-manager.io", "certificates.cert-manager.io"},
	}
	prometheusOperatorCRDs = crdSource{
		module: prometheusOperatorModule,
		dir:    "example/prometheus-operator-crd",
		files:  []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"},
		crds:   []string{"servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"},
	}
)

// crdSourceFor says which CRDs an object of this apiVersion needs, or
// nil for a built-in one.
func crdSourceFor(apiVersion string) *crdSource {
	switch {
	case strings.HasPrefix(apiVersion, "cert-manager.io/"):
		return &certManagerCRDs
	case strings.HasPrefix(apiVersion, "monitoring.coreos.com/"):
		return &prometheusOperatorCRDs
	}
	return nil
}

// moduleDir downloads a module into the module cache, if it is not there
// yet, and returns its directory and version. It runs in the repository,
// so a module without a version resolves as go.mod requires it.
func moduleDir(t *testing.T, ctx context.Context, module string) (dir, version string) {
	t.Helper()
	root, err := harness.RepoRoot()
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	var info struct{ Dir, Version, Error string }
	if len(out) > 0 {
		require.NoError(t, json.Unmarshal(out, &info), "go mod download -json %s printed:\n%s", module, out)
	}
	require.Empty(t, info.Error, "go mod download %s", module)
	require.NoError(t, runErr, "go mod download %s:\n%s", module, stderr.String())
	require.NotEmpty(t, info.Dir, "go mod download %s gave no directory", module)
	return info.Dir, info.Version
}

// installCRDs installs src's CRDs as their project publishes them and
// waits until the apiserver serves them. Server-side apply: some are too
// large for client-side apply's last-applied annotation (cert-manager's
// Issuer CRD is about 330 kB, the limit 256 kB).
func installCRDs(t *testing.T, ctx context.Context, src crdSource) {
	t.Helper()
	dir, version := moduleDir(t, ctx, src.module)
	args := []string{"apply", "--server-side", "--force-conflicts", "--field-manager=webhook-guard-e2e"}
	for _, f := range src.files {
		path := filepath.Join(dir, src.dir, f)
		data, err := os.ReadFile(path)
		require.NoError(t, err, "%s@%s has no %s/%s", src.module, version, src.dir, f)
		// Files under a Helm chart are templates, not manifests; these
		// must be plain CRDs, or this test would install something else
		// than the project does.
		require.NotContains(t, string(data), "{{", "%s is templated; it needs rendering before kubectl can apply it", path)
		require.Contains(t, string(data), "kind: CustomResourceDefinition", path)
		args = append(args, "-f", path)
	}
	r := env.Kubectl(ctx, "", nil, args...)
	require.NoError(t, r.Err, "installing the CRDs of %s@%s:\n%s%s", src.module, version, r.Stdout, r.Stderr)
	// kubectl wait fails at once ("status.conditions accessor error")
	// when it reads a CRD before the apiserver has written its first
	// status, so the wait is retried until it sees Established.
	wait := []string{"wait", "--for=condition=Established", "--timeout=10s"}
	for _, name := range src.crds {
		wait = append(wait, "crd/"+name)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		r = env.Kubectl(ctx, "", nil, wait...)
		if r.Err == nil {
			return
		}
		require.True(t, time.Now().Before(deadline), "waiting for the CRDs of %s@%s:\n%s%s", src.module, version, r.Stdout, r.Stderr)
		time.Sleep(500 * time.Millisecond)
	}
}

// installCertManagerCRDs installs cert-manager's Issuer and Certificate
// CRDs, at the version go.mod requires.
func installCertManagerCRDs(t *testing.T, ctx context.Context) {
	t.Helper()
	installCRDs(t, ctx, certManagerCRDs)
}

// installCRDsFor installs the CRDs the objects of a kustomize build need.
func installCRDsFor(t *testing.T, ctx context.Context, objs []map[string]any) {
	t.Helper()
	var done []string
	for _, obj := range objs {
		apiVersion, _ := obj["apiVersion"].(string)
		if src := crdSourceFor(apiVersion); src != nil && !slices.Contains(done, src.module) {
			installCRDs(t, ctx, *src)
			done = append(done, src.module)
		}
	}
}
