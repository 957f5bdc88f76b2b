package helm

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestRelease_writesInstallYAMLAndTheChart runs "make release" as a
// maintainer does, with the pinned kustomize and helm: install.yaml is the
// default overlay with the image pinned by the digest of the index the
// release built, the packaged chart carries the version and the same
// image, the kubectl-webhook_guard archives hold the plugin of that
// version, webhook-guard.yaml is their krew manifest, and SHA256SUMS holds
// the sha256 of each.
func TestRelease_writesInstallYAMLAndTheChart(t *testing.T) {
	const (
		version = "v9.8.7-rc.1"
		image   = "registry.example.com:5000/team/webhook-guard:" + version
	)
	dist := t.TempDir()
	out, err := makeRelease(t, "VERSION="+version, "IMG="+image, "DIST="+dist)
	require.NoError(t, err, "make release:\n%s", out)
	sums := readSHA256SUMS(t, dist)
	archives := map[string]string{} // by os/arch
	for _, platform := range releasePlatforms() {
		goos, goarch, _ := strings.Cut(platform, "/")
		archives[platform] = "kubectl-webhook_guard_" + version + "_" + goos + "_" + goarch + ".tar.gz"
	}
	for _, name := range append([]string{"install.yaml", "webhook-guard-9.8.7-rc.1.tgz", "webhook-guard.yaml", "image.cdx.json", "image/index.json", "image/oci-layout"}, slices.Collect(maps.Values(archives))...) {
		require.Contains(t, sums, name, "SHA256SUMS")
		assert.Contains(t, out, "sha256:"+sums[name]+"  "+filepath.Join(dist, name), "make release prints the sha256 of %s", name)
	}
	t.Run("the kubectl-webhook_guard archives and their krew manifest", func(t *testing.T) {
		checkKrewRelease(t, dist, version, archives, sums)
	})
	pinned := releasedImage(t, out, "registry.example.com:5000/team/webhook-guard")

	install, err := os.ReadFile(filepath.Join(dist, "install.yaml"))
	require.NoError(t, err)
	want := byKey(t, parseObjects(t, kustomizeBuild(t, "default")))
	got := byKey(t, parseObjects(t, string(install)))
	dep := got["Deployment webhook-guard-system/webhook-guard"]
	require.NotNil(t, dep, "install.yaml has no Deployment")
	containers := dep["spec"].(object)["template"].(object)["spec"].(object)["containers"].([]any)
	assert.Equal(t, pinned, containers[0].(object)["image"], "install.yaml's image is the release's index, by digest")
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
	assert.Contains(t, r.stdout, "image: "+pinned+"\n", "the packaged chart's image")
	files := runHelm(t, "show", "values", chart)
	require.NoError(t, files.err)
	_, digest, _ := strings.Cut(pinned, "@")
	assert.Equal(t, chartImage{Repository: "registry.example.com:5000/team/webhook-guard", Tag: version, Digest: digest}, valuesImage(t, files.stdout))

	t.Run("a version that is no vX.Y.Z is refused", func(t *testing.T) {
		out, err := makeRelease(t, "VERSION=9e6c6ef-dirty", "DIST="+t.TempDir())
		require.Error(t, err)
		assert.Contains(t, out, "VERSION must be vMAJOR.MINOR.PATCH")
	})
	t.Run("an IMG with a digest is refused: the release pins its own", func(t *testing.T) {
		out, err := makeRelease(t, "VERSION=v1.2.3", "IMG=registry.example.com/guard@sha256:"+strings.Repeat("a", 64), "DIST="+t.TempDir())
		require.Error(t, err)
		assert.Contains(t, out, "the release builds the image and pins its own digest")
	})
	t.Run("without IMG the image is IMAGE_REPO at the digest, fully qualified by default; the same tree gives the same files", func(t *testing.T) {
		var releases []map[string]string
		var digests []string
		for repo, args := range map[string][]string{
			"ghcr.io/webhook-guard/webhook-guard": nil,
			"registry.example.com/mirror/guard":   {"IMAGE_REPO=registry.example.com/mirror/guard"},
		} {
			dist := t.TempDir()
			out, err := makeRelease(t, append([]string{"VERSION=v1.2.3", "DIST=" + dist}, args...)...)
			require.NoError(t, err, out)
			pinned := releasedImage(t, out, repo)
			install, err := os.ReadFile(filepath.Join(dist, "install.yaml"))
			require.NoError(t, err)
			assert.Contains(t, string(install), "image: "+pinned+"\n")
			values := runHelm(t, "show", "values", filepath.Join(dist, "webhook-guard-1.2.3.tgz"))
			require.NoError(t, values.err, values.stderr)
			_, digest, _ := strings.Cut(pinned, "@")
			assert.Equal(t, chartImage{Repository: repo, Tag: "v1.2.3", Digest: digest}, valuesImage(t, values.stdout))
			digests = append(digests, digest)
			releases = append(releases, readSHA256SUMS(t, dist))
		}
		assert.Equal(t, digests[0], digests[1], "the image index does not depend on where it is published")
		for name, sum := range releases[0] {
			if strings.HasPrefix(name, "image/") || strings.HasPrefix(name, "kubectl-webhook_guard_") || strings.HasPrefix(name, "guard_") {
				assert.Equal(t, sum, releases[1][name], "%s differs between two releases of the same tree", name)
			}
		}
	})
}

// checkKrewRelease checks the krew manifest dist/webhook-guard.yaml
// against the archives of the release version (by os/arch) and their
// sums: it parses, has one platform per archive, with the archive's
// download URI and sha256; each archive holds an executable
// kubectl-webhook_guard (.exe on windows) and LICENSE; and the host's
// prints version when run.
func checkKrewRelease(t *testing.T, dist, version string, archives, sums map[string]string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dist, "webhook-guard.yaml"))
	require.NoError(t, err)
	var manifest struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			Homepage         string `json:"homepage"`
			ShortDescription string `json:"shortDescription"`
			Description      string `json:"description"`
			Caveats          string `json:"caveats"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.UnmarshalStrict(data, &manifest), "webhook-guard.yaml:\n%s", data)
	assert.Equal(t, "krew.googlecontainertools.github.com/v1alpha2", manifest.APIVersion)
	assert.Equal(t, "Plugin", manifest.Kind)
	assert.Equal(t, "webhook-guard", manifest.Metadata.Name, "the plugin kubectl webhook-guard, in a manifest named webhook-guard.yaml")
	assert.Equal(t, version, manifest.Spec.Version)
	assert.Equal(t, "https://github.com/webhook-guard/webhook-guard", manifest.Spec.Homepage)
	assert.NotEmpty(t, manifest.Spec.ShortDescription)
	assert.NotEmpty(t, manifest.Spec.Description)
	assert.NotContains(t, string(data), "@", "no placeholder is left")
	require.Len(t, manifest.Spec.Platforms, len(archives), "one platform per archive")
	for _, p := range manifest.Spec.Platforms {
		platform := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		archive, ok := archives[platform]
		require.True(t, ok, "platform %s has no archive among %v", platform, archives)
		assert.Equal(t, "https://github.com/webhook-guard/webhook-guard/releases/download/"+version+"/"+archive, p.URI, platform)
		assert.Equal(t, sums[archive], p.SHA256, "the sha256 of %s", archive)
		assert.Equal(t, fileSHA256(t, filepath.Join(dist, archive)), p.SHA256, "the sha256 of %s", archive)
		assert.Equal(t, pluginBinary(p.Selector.MatchLabels["os"]), p.Bin, platform)
	}
	for platform, archive := range archives {
		dir := t.TempDir()
		files := untar(t, filepath.Join(dist, archive), dir)
		goos, _, _ := strings.Cut(platform, "/")
		assert.Equal(t, map[string]bool{pluginBinary(goos): true, "LICENSE": false}, files, "%s holds %s (executable) and LICENSE", archive, pluginBinary(goos))
		if platform != runtime.GOOS+"/"+runtime.GOARCH {
			continue
		}
		out, err := exec.Command(filepath.Join(dir, pluginBinary(runtime.GOOS)), "version", "-o", "jsonpath={.version}").CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Equal(t, version, string(out), "the host's plugin prints its version")
	}
}

// pluginBinary is the plugin's binary on goos: kubectl-webhook_guard, as
// krew's naming guide writes the plugin webhook-guard, with .exe on
// windows.
func pluginBinary(goos string) string {
	if goos == "windows" {
		return "kubectl-webhook_guard.exe"
	}
	return "kubectl-webhook_guard"
}

// releasedImage is the image make release printed it pinned ("release:
// image REPOSITORY@sha256:..."), checked to be repository's.
func releasedImage(t *testing.T, out, repository string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^release: image (\S+)$`).FindStringSubmatch(out)
	require.NotNil(t, m, "make release names no image:\n%s", out)
	assert.Regexp(t, "^"+regexp.QuoteMeta(repository)+"@sha256:[0-9a-f]{64}$", m[1], "the image make release pinned")
	return m[1]
}

// untar extracts the regular files of the .tar.gz at path into dir, and
// returns their names, each true when it is executable by its owner.
func untar(t *testing.T, path, dir string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	require.NoError(t, err)
	tr := tar.NewReader(gz)
	files := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.Equal(t, byte(tar.TypeReg), h.Typeflag, "%s: %s is no regular file", path, h.Name)
		require.Equal(t, filepath.Base(h.Name), h.Name, "%s: %s is not at the top", path, h.Name)
		out, err := os.OpenFile(filepath.Join(dir, h.Name), os.O_CREATE|os.O_WRONLY|os.O_EXCL, os.FileMode(h.Mode)&0o755)
		require.NoError(t, err)
		_, err = io.Copy(out, tr)
		require.NoError(t, err)
		require.NoError(t, out.Close())
		files[h.Name] = h.Mode&0o100 != 0
	}
	return files
}

// releasePlatforms are the platforms the tests' releases build the
// plugin for: $RELEASE_PLATFORMS when set, else only the host's. A
// cold cross-compile of the guard takes minutes on two cores; the
// Makefile's default builds four.
func releasePlatforms() []string {
	if p := strings.Fields(os.Getenv("RELEASE_PLATFORMS")); len(p) > 0 {
		return p
	}
	return []string{runtime.GOOS + "/" + runtime.GOARCH}
}

// makeRelease runs "make release" with the tools this package uses, so
// nothing but the guard is built, for releasePlatforms and an image of
// the host's architecture only (args given later win, as on make's
// command line).
func makeRelease(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"--no-print-directory", "release", "HELM=" + helmBin, "KUSTOMIZE=" + filepath.Join(env.BinDir, "kustomize"),
		"RELEASE_PLATFORMS=" + strings.Join(releasePlatforms(), " "), "IMAGE_PLATFORMS=linux/" + runtime.GOARCH}, args...)...)
	cmd.Dir = root
	cmd.Env = releaseEnv()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// releaseEnv is the test's environment for make: under "make test", make
// passes its own command line down through MAKEFLAGS; a release must see
// only its own.
func releaseEnv() []string {
	var environ []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "IMG", "IMAGE_REPO", "VERSION", "DIST", "RELEASE_PLATFORMS", "IMAGE_PLATFORMS":
			continue
		}
		environ = append(environ, kv)
	}
	return environ
}

// chartImage is the image the chart's values name.
type chartImage struct {
	Repository string `json:"repository"`
	Tag        string `json:"tag"`
	Digest     string `json:"digest"`
}

// valuesImage reads image.repository, tag and digest from a chart's
// values ("helm show values"), whatever comments stand between them.
func valuesImage(t *testing.T, values string) chartImage {
	t.Helper()
	var v struct {
		Image chartImage `json:"image"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(values), &v))
	return v.Image
}
