package helm

// The released chart as people pull it: "make release" writes it and
// SHA256SUMS, the real helm pushes it to a real OCI registry (the
// distribution registry, on loopback, plain HTTP), and installs and pulls
// it back from oci://.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// TestRelease_chartInstallsFromAnOCIRegistryAndPullsBackAsInSHA256SUMS
// releases without IMG, so the image is the Makefile's fully qualified
// default; pushes the chart with "helm push" to a registry the test
// starts; installs it from oci:// into the apiserver (no kubelet: the
// Deployment is checked, not run), whose Deployment has that image and the
// pushed chart's version; and "helm pull" of that version gives back a
// .tgz whose sha256 is the one SHA256SUMS lists.
func TestRelease_chartInstallsFromAnOCIRegistryAndPullsBackAsInSHA256SUMS(t *testing.T) {
	const (
		version      = "v9.8.8"
		chartVersion = "9.8.8"
		image        = "ghcr.io/webhook-guard/webhook-guard:" + version
	)
	ctx := context.Background()
	dist := t.TempDir()
	out, err := makeRelease(t, "VERSION="+version, "DIST="+dist)
	require.NoError(t, err, "make release:\n%s", out)
	sums := readSHA256SUMS(t, dist)
	tgz := "webhook-guard-" + chartVersion + ".tgz"
	require.Contains(t, sums, tgz)
	assert.Contains(t, out, "sha256:"+sums[tgz]+"  "+filepath.Join(dist, tgz), "make release prints the chart's digest")

	registry := startRegistry(t)
	repo := "oci://" + registry + "/charts"
	ref := repo + "/webhook-guard"

	push := runHelm(t, "push", filepath.Join(dist, tgz), repo, "--plain-http")
	require.NoError(t, push.err, "helm push:\n%s%s", push.stdout, push.stderr)
	assert.Contains(t, push.stdout+push.stderr, "Pushed: "+strings.TrimPrefix(ref, "oci://")+":"+chartVersion)

	ns := "helm-oci-e2e"
	require.NoError(t, env.EnsureNamespace(ctx, ns))
	dumpOnFailure(t, ns)
	install := runHelm(t, append([]string{"install", "webhook-guard", ref, "--version", chartVersion, "--plain-http", "--namespace", releaseNamespace, "--create-namespace"}, exampleValues()...)...)
	require.NoError(t, install.err, "helm install from %s:\n%s%s", ref, install.stdout, install.stderr)
	// No kubelet runs the pre-delete hook's Job here: helm would wait for it.
	t.Cleanup(func() { runHelm(t, "uninstall", "webhook-guard", "--namespace", releaseNamespace, "--no-hooks") })

	dep := &appsv1.Deployment{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: "webhook-guard"}, dep))
	assert.Equal(t, "webhook-guard-"+chartVersion, dep.Labels["helm.sh/chart"], "the installed chart is the pushed version")
	require.NotEmpty(t, dep.Spec.Template.Spec.Containers)
	assert.Equal(t, image, dep.Spec.Template.Spec.Containers[0].Image, "the installed Deployment's image")

	pulled := t.TempDir()
	pull := runHelm(t, "pull", ref, "--version", chartVersion, "--plain-http", "--destination", pulled)
	require.NoError(t, pull.err, "helm pull:\n%s%s", pull.stdout, pull.stderr)
	assert.Equal(t, sums[tgz], fileSHA256(t, filepath.Join(pulled, tgz)), "the pulled chart's sha256 is the one in SHA256SUMS")

	t.Run("a version that was not pushed is not found", func(t *testing.T) {
		r := runHelm(t, "pull", ref, "--version", "9.8.9", "--plain-http", "--destination", t.TempDir())
		require.Error(t, r.err)
		assert.Contains(t, r.stderr, "not found")
	})
}

// readSHA256SUMS parses dist/SHA256SUMS ("<hex>  <file>" lines, as
// sha256sum writes them), checks that it lists every other file in dist
// with its real sha256, and returns the sums by file name.
func readSHA256SUMS(t *testing.T, dist string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dist, "SHA256SUMS"))
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	sums := map[string]string{}
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		sum, name, ok := strings.Cut(lines.Text(), "  ")
		require.True(t, ok, "SHA256SUMS line %q is not \"<hex>  <file>\"", lines.Text())
		require.Len(t, sum, 64, "SHA256SUMS line %q", lines.Text())
		sums[name] = sum
	}
	require.NoError(t, lines.Err())
	entries, err := os.ReadDir(dist)
	require.NoError(t, err)
	var artifacts []string
	for _, e := range entries {
		if e.Name() != "SHA256SUMS" {
			artifacts = append(artifacts, e.Name())
			assert.Equal(t, fileSHA256(t, filepath.Join(dist, e.Name())), sums[e.Name()], "SHA256SUMS's sum of %s", e.Name())
		}
	}
	assert.Len(t, sums, len(artifacts), "SHA256SUMS lists exactly the artifacts %v", artifacts)
	return sums
}

// fileSHA256 is the hex sha256 of the file at path.
func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// startRegistry runs the distribution registry on a free loopback port,
// plain HTTP, storing in a temporary folder, until the test ends, and
// returns its host:port once it answers /v2/. Its log is printed if the
// test fails.
func startRegistry(t *testing.T) string {
	t.Helper()
	addr, err := harness.FreeLoopbackAddr()
	require.NoError(t, err)
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, `version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
`, filepath.Join(dir, "storage"), addr), 0o600))

	// REGISTRY_* variables override the configuration; OTEL_* would send
	// traces to an OTLP collector.
	var environ []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REGISTRY_") && !strings.HasPrefix(kv, "OTEL_") {
			environ = append(environ, kv)
		}
	}
	var logs harness.SyncBuffer
	cmd := exec.Command(registryBin, "serve", config)
	cmd.Env = append(environ, "OTEL_TRACES_EXPORTER=none")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start(), "starting the registry %s", registryBin)
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("registry log:\n%s", logs.String())
		}
	})

	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		select {
		case <-exited:
			require.FailNow(t, "the registry exited", "log:\n%s", logs.String())
		default:
		}
		if resp, err := http.Get("http://" + addr + "/v2/"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		require.True(t, time.Now().Before(deadline), "the registry never answered on %s; log:\n%s", addr, logs.String())
	}
}
