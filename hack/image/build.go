package main

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The image's fixed parts: where the binary and the certificates go, who
// runs it, and what it runs (the Dockerfile's ENTRYPOINT and CMD).
const (
	binaryPath = "guard"
	certsPath  = "etc/ssl/certs/ca-certificates.crt"
	user       = "65532:65532"
)

var (
	entrypoint = []string{"/" + binaryPath}
	cmd        = []string{"run", "--config", "/etc/webhook-guard/config.yaml"}
	// epoch is every timestamp of the image: the layer's files and the
	// config's created, as ko writes them without SOURCE_DATE_EPOCH.
	epoch = time.Unix(0, 0).UTC()
)

// Labels are the OCI annotations of the image's config
// (https://github.com/opencontainers/image-spec/blob/main/annotations.md),
// also set on the index.
type Labels struct {
	// Source is org.opencontainers.image.source: the repository's URL.
	Source string
	// Version is org.opencontainers.image.version: the release, vX.Y.Z.
	Version string
	// Revision is org.opencontainers.image.revision: the commit.
	Revision string
	// Licenses is org.opencontainers.image.licenses: an SPDX expression.
	Licenses string
}

// Map is l as labels.
func (l Labels) Map() map[string]string {
	return map[string]string{
		"org.opencontainers.image.source":   l.Source,
		"org.opencontainers.image.version":  l.Version,
		"org.opencontainers.image.revision": l.Revision,
		"org.opencontainers.image.licenses": l.Licenses,
		"org.opencontainers.image.title":    "webhook-guard",
	}
}

// platformFlag collects "-platform os/arch=binary".
type platformFlag []platformBinary

type platformBinary struct {
	platform v1.Platform
	binary   string
}

func (p *platformFlag) String() string { return fmt.Sprint(*p) }

func (p *platformFlag) Set(s string) error {
	platform, binary, ok := strings.Cut(s, "=")
	goos, goarch, ok2 := strings.Cut(platform, "/")
	if !ok || !ok2 || binary == "" || goos == "" || goarch == "" {
		return fmt.Errorf("%q is not os/arch=binary", s)
	}
	*p = append(*p, platformBinary{platform: v1.Platform{OS: goos, Architecture: goarch}, binary: binary})
	return nil
}

func runBuild(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	dir := fs.String("layout", "", "the OCI layout to write (created; must not hold an index yet)")
	tag := fs.String("tag", "", "org.opencontainers.image.ref.name of the index in the layout (default: -version)")
	var labels Labels
	fs.StringVar(&labels.Source, "source", "https://github.com/webhook-guard/webhook-guard", "org.opencontainers.image.source")
	fs.StringVar(&labels.Version, "version", "", "org.opencontainers.image.version")
	fs.StringVar(&labels.Revision, "revision", "", "org.opencontainers.image.revision")
	fs.StringVar(&labels.Licenses, "licenses", "Apache-2.0", "org.opencontainers.image.licenses")
	var platforms platformFlag
	fs.Var(&platforms, "platform", "os/arch=binary, once per image of the index")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || labels.Version == "" || labels.Revision == "" || len(platforms) == 0 {
		return errors.New("build needs -layout, -version, -revision and at least one -platform")
	}
	if *tag == "" {
		*tag = labels.Version
	}
	idx, err := Index(platforms, labels)
	if err != nil {
		return err
	}
	p, err := layout.Write(*dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the layout %s: %w", *dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": *tag})); err != nil {
		return fmt.Errorf("writing the index into %s: %w", *dir, err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Println(digest)
	return nil
}

// Index is the image index of one image per platform, each the binary of
// that platform on scratch, with labels.
func Index(platforms []platformBinary, labels Labels) (v1.ImageIndex, error) {
	certs, err := caCertificates()
	if err != nil {
		return nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.Annotations(idx, labels.Map()).(v1.ImageIndex)
	for _, pb := range platforms {
		img, err := Image(pb.platform, pb.binary, certs, labels)
		if err != nil {
			return nil, fmt.Errorf("the %s image: %w", pb.platform, err)
		}
		platform := pb.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &platform}})
	}
	return idx, nil
}

// Image is the image of one platform: one layer with the binary and the
// CA certificates, and its config.
func Image(platform v1.Platform, binary string, certs []byte, labels Labels) (v1.Image, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	layerTar, err := layerTar(data, certs)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Author:    "webhook-guard release",
		Created:   v1.Time{Time: epoch},
		CreatedBy: "hack/image build",
		Comment:   "the guard binary and the CA certificates",
	}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = platform.OS, platform.Architecture, platform.Variant
	cfg.Created = v1.Time{Time: epoch}
	cfg.Author = "webhook-guard"
	cfg.Config.User = user
	cfg.Config.Entrypoint = entrypoint
	cfg.Config.Cmd = cmd
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = []string{"PATH=/", "SSL_CERT_FILE=/" + certsPath}
	cfg.Config.Labels = labels.Map()
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels.Map()).(v1.Image), nil
}

// layerTar is the layer's tar: the folders, the certificates and the
// binary, owned by root, dated epoch.
func layerTar(binary, certs []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"etc/", "etc/ssl/", "etc/ssl/certs/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{certsPath, 0o644, certs}, {binaryPath, 0o755, binary}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// caCertificates is the PEM bundle of the NSS roots that
// golang.org/x/crypto/x509roots/fallback pins, less those with a
// constraint PEM cannot carry (a distrust-after date).
func caCertificates() ([]byte, error) {
	var buf bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
	}
	if buf.Len() == 0 {
		return nil, errors.New("golang.org/x/crypto/x509roots/fallback/bundle has no roots")
	}
	return buf.Bytes(), nil
}
