package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func runPush(args []string) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	dir := fs.String("layout", "", "the OCI layout image build wrote")
	to := fs.String("to", "", "the repository to push to, with a tag to set: registry.example.com/webhook-guard:v0.1.0")
	plainHTTP := fs.Bool("plain-http", false, "talk HTTP, not HTTPS, to the registry (loopback registries are plain HTTP already)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *to == "" {
		return errors.New("push needs -layout and -to")
	}
	var opts []name.Option
	if *plainHTTP {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(*to, opts...)
	if err != nil {
		return err
	}
	if _, ok := ref.(name.Digest); ok {
		return fmt.Errorf("-to %s: push to a tag or a repository; the digest is the index's", *to)
	}
	idx, err := LayoutIndex(*dir)
	if err != nil {
		return err
	}
	if err := remote.WriteIndex(ref, idx, remote.WithContext(context.Background()), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("pushing to %s: %w", ref, err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Println(ref.Context().Digest(digest.String()).String())
	return nil
}

// LayoutIndex is the one image index that image build wrote into the OCI
// layout dir.
func LayoutIndex(dir string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the layout %s: %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		return nil, fmt.Errorf("the layout %s holds %d manifests; image build writes one image index", dir, len(m.Manifests))
	}
	return top.ImageIndex(m.Manifests[0].Digest)
}
