package helm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestRelease_writesInstallYAMLAndTheChart runs "make release" as a
// maintainer does, with the pinned kustomize and helm: install.yaml is the
// default overlay with the image pinned, the packaged chart carries the
// version and the same image, and SHA256SUMS holds the sha256 of both.
func TestRelease_writesInstallYAMLAndTheChart(t *testing.T) {
	const (
		version = "v9.8.7-rc.1"
		image   = "registry.example.com:5000/team/webhook-guard:" + version
	)
	dist := t.TempDir()
	out, err := makeRelease(t, "VERSION="+version, "IMG="+image, "DIST="+dist)
	require.NoError(t, err, "make release:\n%s", out)
	sums := readSHA256SUMS(t, dist)
	for _, name := range []string{"install.yaml", "webhook-guard-9.8.7-rc.1.tgz"} {
		require.Contains(t, sums, name, "SHA256SUMS")
		assert.Contains(t, out, "sha256:"+sums[name]+"  "+filepath.Join(dist, name), "make release prints the sha256 of %s", name)
	}

	install, err := os.ReadFile(filepath.Join(dist, "install.yaml"))
	require.NoError(t, err)
	want := byKey(t, parseObjects(t, kustomizeBuild(t, "default")))
	got := byKey(t, parseObjects(t, string(install)))
	dep := got["Deployment webhook-guard-system/webhook-guard"]
	require.NotNil(t, dep, "install.yaml has no Deployment")
	containers := dep["spec"].(object)["template"].(object)["spec"].(object)["containers"].([]any)
	assert.Equal(t, image, containers[0].(object)["image"], "install.yaml's image")
	containers[0].(object)["image"] = "webhook-guard:latest"
	assert.Equal(t, want, got, "install.yaml is the default overlay, image aside")

	chart := filepath.Join(dist, "webhook-guard-9.8.7-rc.1.tgz")
	show := runHelm(t, "show", "chart", chart)
	require.NoError(t, show.err, show.stderr)
	var meta struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(show.stdout), &meta))
	assert.Equal(t, "9.8.7-rc.1", meta.Version)
	assert.Equal(t, version, meta.AppVersion)

	r := runHelm(t, append([]string{"template", "webhook-guard", chart, "--show-only", "templates/deployment.yaml"}, exampleValues()...)...)
	require.NoError(t, r.err, r.stderr)
	assert.Contains(t, r.stdout, "image: "+image+"\n", "the packaged chart's image")
	files := runHelm(t, "show", "values", chart)
	require.NoError(t, files.err)
	assert.Contains(t, files.stdout, "  repository: registry.example.com:5000/team/webhook-guard\n  tag: \""+version+"\"\n")

	t.Run("a version that is no vX.Y.Z is refused", func(t *testing.T) {
		out, err := makeRelease(t, "VERSION=9e6c6ef-dirty", "DIST="+t.TempDir())
		require.Error(t, err)
		assert.Contains(t, out, "VERSION must be vMAJOR.MINOR.PATCH")
	})
	t.Run("without IMG the image is IMAGE_REPO:VERSION, fully qualified by default", func(t *testing.T) {
		for repo, args := range map[string][]string{
			"ghcr.io/webhook-guard/webhook-guard": nil,
			"registry.example.com/mirror/guard":   {"IMAGE_REPO=registry.example.com/mirror/guard"},
		} {
			dist := t.TempDir()
			out, err := makeRelease(t, append([]string{"VERSION=v1.2.3", "DIST=" + dist}, args...)...)
			require.NoError(t, err, out)
			install, err := os.ReadFile(filepath.Join(dist, "install.yaml"))
			require.NoError(t, err)
			assert.Contains(t, string(install), "image: "+repo+":v1.2.3\n")
			values := runHelm(t, "show", "values", filepath.Join(dist, "webhook-guard-1.2.3.tgz"))
			require.NoError(t, values.err, values.stderr)
			assert.Contains(t, values.stdout, "  repository: "+repo+"\n  tag: \"v1.2.3\"\n")
		}
	})
}

// makeRelease runs "make release" with the tools this package uses, so
// nothing is built.
func makeRelease(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"--no-print-directory", "release", "HELM=" + helmBin, "KUSTOMIZE=" + filepath.Join(env.BinDir, "kustomize")}, args...)...)
	cmd.Dir = root
	// Under "make test", make passes its own command line down through
	// MAKEFLAGS; this release must see only its own.
	var environ []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "IMG", "IMAGE_REPO", "VERSION", "DIST":
			continue
		}
		environ = append(environ, kv)
	}
	cmd.Env = environ
	out, err := cmd.CombinedOutput()
	return string(out), err
}
