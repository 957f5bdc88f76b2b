package main

import (
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIndex_isReproducibleAndRunsAsNonRoot(t *testing.T) {
	dir := t.TempDir()
	var platforms []platformBinary
	for _, arch := range []string{"amd64", "arm64"} {
		bin := filepath.Join(dir, arch)
		require.NoError(t, os.WriteFile(bin, []byte("\x7fELF "+arch), 0o755))
		platforms = append(platforms, platformBinary{platform: v1.Platform{OS: "linux", Architecture: arch}, binary: bin})
	}
	labels := Labels{Source: "https://github.com/webhook-guard/webhook-guard", Version: "v0.1.0", Revision: "0123abc", Licenses: "Apache-2.0"}
	first, err := Index(platforms, labels)
	require.NoError(t, err)
	second, err := Index(platforms, labels)
	require.NoError(t, err)
	d1, err := first.Digest()
	require.NoError(t, err)
	d2, err := second.Digest()
	require.NoError(t, err)
	assert.Equal(t, d1, d2, "the same binaries give the same index")

	other, err := Index(platforms, Labels{Source: labels.Source, Version: "v0.1.1", Revision: labels.Revision, Licenses: labels.Licenses})
	require.NoError(t, err)
	d3, err := other.Digest()
	require.NoError(t, err)
	assert.NotEqual(t, d1, d3, "another version is another index")

	m, err := first.IndexManifest()
	require.NoError(t, err)
	require.Len(t, m.Manifests, 2)
	for i, desc := range m.Manifests {
		assert.Equal(t, platforms[i].platform, *desc.Platform)
		img, err := first.Image(desc.Digest)
		require.NoError(t, err)
		cfg, err := img.ConfigFile()
		require.NoError(t, err)
		assert.Equal(t, "65532:65532", cfg.Config.User)
		assert.Equal(t, []string{"/guard"}, cfg.Config.Entrypoint)
		assert.Equal(t, "v0.1.0", cfg.Config.Labels["org.opencontainers.image.version"])
		assert.Equal(t, platforms[i].platform.Architecture, cfg.Architecture)
		assert.Equal(t, epoch, cfg.Created.UTC())
	}
}

func TestStripQualifiers(t *testing.T) {
	for in, want := range map[string]string{
		"pkg:golang/k8s.io/api@v0.37.2?goarch=amd64&goos=linux&type=module":              "pkg:golang/k8s.io/api@v0.37.2?type=module",
		"pkg:golang/github.com/a/b@v1.0.0?goarch=arm64&goos=linux&type=module#cmd/guard": "pkg:golang/github.com/a/b@v1.0.0?type=module#cmd/guard",
		"pkg:golang/k8s.io/api@v0.37.2":                                                  "pkg:golang/k8s.io/api@v0.37.2",
		"pkg:golang/k8s.io/api@v0.37.2?goos=linux":                                       "pkg:golang/k8s.io/api@v0.37.2",
	} {
		assert.Equal(t, want, stripQualifiers(in, "goos", "goarch"), in)
	}
}
