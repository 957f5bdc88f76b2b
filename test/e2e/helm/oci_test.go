package helm

// The release as people consume it: "make release" writes it, "make
// release-push" pushes its image index and the real helm pushes its chart
// to a real OCI registry (the distribution registry, on loopback, plain
// HTTP); the chart is installed from oci:// and pulled back with helm, the
// pushed image is read with go-containerregistry, and the plugin is
// installed with the real krew.

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// imagePlatforms are the platforms of the release's image index.
var imagePlatforms = []string{"linux/amd64", "linux/arm64"}

// TestRelease_asAUserConsumesIt releases into a temporary dist with the
// image repository on a registry the test starts, then consumes every
// artifact as a user does: pushes the image index ("make release-push")
// and the chart ("helm push"), installs the chart from oci:// into the
// apiserver (no kubelet: the objects are checked, not run) and pulls it
// back; reads the pushed image with go-containerregistry and runs the
// host's binary out of its layer; installs the plugin with krew from the
// manifest and the archive and runs it through kubectl; and checks
// SHA256SUMS and the SBOMs.
func TestRelease_asAUserConsumesIt(t *testing.T) {
	const (
		version      = "v9.8.8"
		chartVersion = "9.8.8"
	)
	ctx := context.Background()
	registry := startRegistry(t)
	repository := registry + "/team/webhook-guard"
	dist := t.TempDir()
	out, err := makeRelease(t, "VERSION="+version, "DIST="+dist, "IMAGE_REPO="+repository, "IMAGE_PLATFORMS="+strings.Join(imagePlatforms, " "))
	require.NoError(t, err, "make release:\n%s", out)
	sums := readSHA256SUMS(t, dist)
	tgz := "webhook-guard-" + chartVersion + ".tgz"
	require.Contains(t, sums, tgz)
	assert.Contains(t, out, "sha256:"+sums[tgz]+"  "+filepath.Join(dist, tgz), "make release prints the chart's digest")

	// The image index: pushed, it has the digest install.yaml and the
	// chart name.
	push := exec.Command("make", "--no-print-directory", "release-push", "VERSION="+version, "DIST="+dist, "IMAGE_REPO="+repository)
	push.Dir = root
	push.Env = releaseEnv()
	pushed, err := push.CombinedOutput()
	require.NoError(t, err, "make release-push:\n%s", pushed)
	digestRef := regexp.MustCompile(regexp.QuoteMeta(repository) + `@sha256:[0-9a-f]{64}`).FindString(string(pushed))
	require.NotEmpty(t, digestRef, "make release-push prints the pushed repository@digest:\n%s", pushed)
	assert.Contains(t, out, "release: image "+digestRef, "make release named the digest it pushed")
	tagged, err := name.ParseReference(repository + ":" + version)
	require.NoError(t, err)
	desc, err := remote.Head(tagged)
	require.NoError(t, err, "the pushed tag %s", tagged)
	assert.Equal(t, digestRef, repository+"@"+desc.Digest.String(), "the tag %s is the index make release pinned", tagged)
	install, err := os.ReadFile(filepath.Join(dist, "install.yaml"))
	require.NoError(t, err)
	assert.Equal(t, []string{digestRef}, imageRefs(string(install)), "every image of install.yaml")

	t.Run("the pushed image, read with go-containerregistry", func(t *testing.T) {
		checkPushedImage(t, digestRef, version)
	})

	t.Run("the chart from oci://, every image at the pushed digest", func(t *testing.T) {
		repo := "oci://" + registry + "/charts"
		ref := repo + "/webhook-guard"
		push := runHelm(t, "push", filepath.Join(dist, tgz), repo, "--plain-http")
		require.NoError(t, push.err, "helm push:\n%s%s", push.stdout, push.stderr)
		assert.Contains(t, push.stdout+push.stderr, "Pushed: "+strings.TrimPrefix(ref, "oci://")+":"+chartVersion)

		pulled := t.TempDir()
		pull := runHelm(t, "pull", ref, "--version", chartVersion, "--plain-http", "--destination", pulled)
		require.NoError(t, pull.err, "helm pull:\n%s%s", pull.stdout, pull.stderr)
		assert.Equal(t, sums[tgz], fileSHA256(t, filepath.Join(pulled, tgz)), "the pulled chart's sha256 is the one in SHA256SUMS")

		ns := "helm-oci-e2e"
		require.NoError(t, env.EnsureNamespace(ctx, ns))
		dumpOnFailure(t, ns)
		install := runHelm(t, append([]string{"install", "webhook-guard", filepath.Join(pulled, tgz), "--namespace", releaseNamespace, "--create-namespace"}, exampleValues()...)...)
		require.NoError(t, install.err, "helm install of the pulled chart:\n%s%s", install.stdout, install.stderr)
		// No kubelet runs the pre-delete hook's Job here: helm would wait for it.
		t.Cleanup(func() { runHelm(t, "uninstall", "webhook-guard", "--namespace", releaseNamespace, "--no-hooks") })
		manifest := runHelm(t, "get", "manifest", "webhook-guard", "--namespace", releaseNamespace)
		require.NoError(t, manifest.err, manifest.stderr)
		hooks := runHelm(t, "get", "hooks", "webhook-guard", "--namespace", releaseNamespace)
		require.NoError(t, hooks.err, hooks.stderr)
		refs := imageRefs(manifest.stdout + hooks.stdout)
		require.NotEmpty(t, refs, "the installed release names no image")
		assert.Equal(t, []string{digestRef}, refs, "every image the installed chart names, hooks included")

		r := env.Kubectl(ctx, "", nil, "get", "deployments,jobs,cronjobs,daemonsets,statefulsets", "-A", "-o", "jsonpath={range .items[*]}{range .spec.template.spec.containers[*]}{.image}{\"\\n\"}{end}{end}")
		require.NoError(t, r.Err, r.Stderr)
		assert.Equal(t, []string{digestRef}, uniqueLines(r.Stdout), "the images of the workloads kube-apiserver holds")

		t.Run("a version that was not pushed is not found", func(t *testing.T) {
			r := runHelm(t, "pull", ref, "--version", "9.8.9", "--plain-http", "--destination", t.TempDir())
			require.Error(t, r.err)
			assert.Contains(t, r.stderr, "not found")
		})
	})

	t.Run("the plugin, installed with krew", func(t *testing.T) {
		checkKrewInstall(t, dist, version)
	})

	t.Run("the SBOMs list the Kubernetes modules", func(t *testing.T) {
		for _, platform := range append(releasePlatforms(), imagePlatforms...) {
			goos, goarch, _ := strings.Cut(platform, "/")
			file := "guard_" + version + "_" + goos + "_" + goarch + ".cdx.json"
			require.Contains(t, sums, file, "SHA256SUMS lists the SBOM of the %s binary", platform)
			sbom := readSBOM(t, filepath.Join(dist, file))
			assert.Equal(t, "application", sbom.Metadata.Component.Type, file)
			assert.Equal(t, version, sbom.Metadata.Component.Version, file)
			assertKubernetesModules(t, file, sbom)
		}
		sbom := readSBOM(t, filepath.Join(dist, "image.cdx.json"))
		assert.Equal(t, "container", sbom.Metadata.Component.Type)
		assert.Equal(t, digestRef, sbom.Metadata.Component.Name+"@"+sbom.Metadata.Component.Version, "the image SBOM describes the pushed index")
		assertKubernetesModules(t, "image.cdx.json", sbom)
	})
}

// imageRefs are the distinct values of the "image:" fields of YAML
// documents, sorted.
func imageRefs(yaml string) []string {
	var refs []string
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:- )?image: "?([^"\s]+)"?\s*$`).FindAllStringSubmatch(yaml, -1) {
		if !slices.Contains(refs, m[1]) {
			refs = append(refs, m[1])
		}
	}
	slices.Sort(refs)
	return refs
}

// uniqueLines are the distinct non-empty lines of s, sorted.
func uniqueLines(s string) []string {
	var lines []string
	for l := range strings.SplitSeq(s, "\n") {
		if l != "" && !slices.Contains(lines, l) {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	return lines
}

// checkPushedImage reads the image index at ref from the registry: one
// image per imagePlatforms, each with the config a user runs (user 65532,
// the guard as entrypoint, the OCI labels), whose layer holds the guard
// binary and the CA certificates; the host's binary prints version.
func checkPushedImage(t *testing.T, ref, version string) {
	t.Helper()
	digest, err := name.NewDigest(ref)
	require.NoError(t, err)
	idx, err := remote.Index(digest)
	require.NoError(t, err)
	manifest, err := idx.IndexManifest()
	require.NoError(t, err)
	var platforms []string
	for _, m := range manifest.Manifests {
		require.NotNil(t, m.Platform, "the index entry %s has no platform", m.Digest)
		platforms = append(platforms, m.Platform.String())
	}
	assert.ElementsMatch(t, imagePlatforms, platforms, "the index's platforms")

	host := "linux/" + runtime.GOARCH
	ranHost := false
	for _, m := range manifest.Manifests {
		platform := m.Platform.String()
		img, err := idx.Image(m.Digest)
		require.NoError(t, err, platform)
		cfg, err := img.ConfigFile()
		require.NoError(t, err, platform)
		assert.Equal(t, m.Platform.OS, cfg.OS, platform)
		assert.Equal(t, m.Platform.Architecture, cfg.Architecture, platform)
		assert.Equal(t, "65532:65532", cfg.Config.User, "%s runs as the non-root user 65532", platform)
		assert.Equal(t, []string{"/guard"}, cfg.Config.Entrypoint, platform)
		assert.Equal(t, []string{"run", "--config", "/etc/webhook-guard/config.yaml"}, cfg.Config.Cmd, platform)
		labels := cfg.Config.Labels
		assert.Equal(t, "https://github.com/webhook-guard/webhook-guard", labels["org.opencontainers.image.source"], platform)
		assert.Equal(t, version, labels["org.opencontainers.image.version"], platform)
		assert.Regexp(t, `^[0-9a-f]{7,40}$`, labels["org.opencontainers.image.revision"], platform)
		assert.Equal(t, "Apache-2.0", labels["org.opencontainers.image.licenses"], platform)

		files := layerFiles(t, img)
		require.Contains(t, files, "guard", "%s: the layer has /guard", platform)
		require.Contains(t, files, "etc/ssl/certs/ca-certificates.crt", "%s: the layer has the CA certificates", platform)
		assert.Contains(t, string(files["etc/ssl/certs/ca-certificates.crt"]), "-----BEGIN CERTIFICATE-----", platform)
		assert.Equal(t, "\x7fELF", string(files["guard"][:4]), "%s: /guard is a linux binary", platform)
		if platform != host || runtime.GOOS != "linux" {
			continue
		}
		bin := filepath.Join(t.TempDir(), "guard")
		require.NoError(t, os.WriteFile(bin, files["guard"], 0o755))
		got, err := exec.Command(bin, "version", "-o", "jsonpath={.version}").CombinedOutput()
		require.NoError(t, err, "%s", got)
		assert.Equal(t, version, string(got), "the %s image's guard version", platform)
		ranHost = true
	}
	if runtime.GOOS == "linux" && slices.Contains(imagePlatforms, host) {
		assert.True(t, ranHost, "the host's binary (%s) was not run", host)
	}
}

// layerFiles are the regular files of img's layers, by path.
func layerFiles(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	layers, err := img.Layers()
	require.NoError(t, err)
	files := map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		require.NoError(t, err)
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			if h.Typeflag != tar.TypeReg {
				continue
			}
			data, err := io.ReadAll(tr)
			require.NoError(t, err)
			files[h.Name] = data
		}
		require.NoError(t, rc.Close())
	}
	return files
}

// checkKrewInstall installs the plugin of the host's platform with the
// real krew from the release's manifest and archive into a temporary
// KREW_ROOT, and runs it as kubectl does: "kubectl webhook-guard
// version".
func checkKrewInstall(t *testing.T, dist, version string) {
	t.Helper()
	krew := os.Getenv("KREW")
	require.NotEmpty(t, krew, "KREW is not set: run make e2e, or KREW=\"$(hack/tools/krew.sh)\"")
	archive := filepath.Join(dist, "kubectl-webhook_guard_"+version+"_"+runtime.GOOS+"_"+runtime.GOARCH+".tar.gz")
	krewRoot := t.TempDir()
	environ := krewEnv(krewRoot)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, krew, "install", "--manifest="+filepath.Join(dist, "webhook-guard.yaml"), "--archive="+archive)
	install.Env = environ
	out, err := install.CombinedOutput()
	require.NoError(t, err, "krew install:\n%s", out)
	assert.Contains(t, string(out), `Installed plugin: webhook-guard`)

	run := exec.CommandContext(ctx, filepath.Join(env.BinDir, "kubectl"), "webhook-guard", "version", "-o", "jsonpath={.version}")
	run.Env = environ
	got, err := run.CombinedOutput()
	require.NoError(t, err, "kubectl webhook-guard version:\n%s", got)
	assert.Equal(t, version, string(got), "kubectl webhook-guard version")

	help := exec.CommandContext(ctx, filepath.Join(env.BinDir, "kubectl"), "webhook-guard", "--help")
	help.Env = environ
	got, err = help.CombinedOutput()
	require.NoError(t, err, "kubectl webhook-guard --help:\n%s", got)
	assert.Contains(t, string(got), "kubectl webhook-guard [command]", "the plugin names itself as kubectl runs it")

	t.Run("an archive whose sha256 is not the manifest's is refused", func(t *testing.T) {
		other := t.TempDir()
		tampered := filepath.Join(other, filepath.Base(archive))
		data, err := os.ReadFile(archive)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(tampered, append(data, 0), 0o644))
		install := exec.CommandContext(ctx, krew, "install", "--manifest="+filepath.Join(dist, "webhook-guard.yaml"), "--archive="+tampered)
		install.Env = krewEnv(filepath.Join(other, "krew"))
		out, err := install.CombinedOutput()
		require.Error(t, err, "krew installed a tampered archive:\n%s", out)
		assert.Contains(t, string(out), "checksum")
	})
}

// krewEnv is the environment of krew and kubectl with the plugins of
// krewRoot: krew's KREW_ROOT, its bin first on PATH, then kubectl's, and
// no check for a newer krew (it would reach GitHub).
func krewEnv(krewRoot string) []string {
	return append(os.Environ(), "KREW_ROOT="+krewRoot, "KREW_NO_UPGRADE_CHECK=1",
		"PATH="+filepath.Join(krewRoot, "bin")+string(os.PathListSeparator)+env.BinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// sbom is the part of a CycloneDX document the tests read.
type sbom struct {
	BOMFormat string `json:"bomFormat"`
	Metadata  struct {
		Component sbomComponent `json:"component"`
	} `json:"metadata"`
	Components []sbomComponent `json:"components"`
}

type sbomComponent struct {
	Type    string `json:"type"`
	Name    string `json:"name"`
	Version string `json:"version"`
	PURL    string `json:"purl"`
}

func readSBOM(t *testing.T, path string) sbom {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var s sbom
	require.NoError(t, json.Unmarshal(data, &s), path)
	require.Equal(t, "CycloneDX", s.BOMFormat, path)
	return s
}

// assertKubernetesModules checks that the SBOM lists the Kubernetes
// modules the guard is built on, at the versions of the root go.mod.
func assertKubernetesModules(t *testing.T, file string, s sbom) {
	t.Helper()
	versions := map[string]string{}
	for _, c := range s.Components {
		versions[c.Name] = c.Version
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	for _, module := range []string{"k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go", "k8s.io/apiserver", "sigs.k8s.io/controller-runtime"} {
		want := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(module) + ` (v\S+)`).FindStringSubmatch(string(gomod))
		require.NotNil(t, want, "go.mod requires no %s", module)
		assert.Equal(t, want[1], versions[module], "%s lists %s at the version of go.mod", file, module)
	}
}

// readSHA256SUMS parses dist/SHA256SUMS ("<hex>  <file>" lines, as
// sha256sum writes them), checks that it lists every other file in dist,
// those in its folders (the image's OCI layout) included, with its real
// sha256, and returns the sums by path in dist.
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
	var artifacts []string
	require.NoError(t, filepath.WalkDir(dist, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dist, path)
		if err != nil || rel == "SHA256SUMS" {
			return err
		}
		artifacts = append(artifacts, filepath.ToSlash(rel))
		assert.Equal(t, fileSHA256(t, path), sums[filepath.ToSlash(rel)], "SHA256SUMS's sum of %s", rel)
		return nil
	}))
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
