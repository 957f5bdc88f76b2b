package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
)

// bom is the part of a CycloneDX JSON document the image's SBOM is made
// of; what it does not name (compositions, the binary's properties) is
// left out of the merge.
type bom struct {
	Schema       string         `json:"$schema,omitempty"`
	BOMFormat    string         `json:"bomFormat"`
	SpecVersion  string         `json:"specVersion"`
	Version      int            `json:"version"`
	Metadata     bomMetadata    `json:"metadata"`
	Components   []component    `json:"components,omitempty"`
	Dependencies []bomDependsOn `json:"dependencies,omitempty"`
}

type bomMetadata struct {
	Tools      json.RawMessage `json:"tools,omitempty"`
	Component  *component      `json:"component,omitempty"`
	Properties []property      `json:"properties,omitempty"`
}

// component keeps the fields of a CycloneDX component it reads, and the
// rest as they are.
type component struct {
	BOMRef     string                     `json:"bom-ref"`
	Type       string                     `json:"type"`
	Name       string                     `json:"name"`
	Version    string                     `json:"version,omitempty"`
	PURL       string                     `json:"purl,omitempty"`
	Properties []property                 `json:"properties,omitempty"`
	Components []component                `json:"components,omitempty"`
	Rest       map[string]json.RawMessage `json:"-"`
}

type property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type bomDependsOn struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn,omitempty"`
}

func runSBOM(args []string) error {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	dir := fs.String("layout", "", "the OCI layout image build wrote")
	repository := fs.String("repository", "", "the repository the image is published to")
	out := fs.String("out", "", "the SBOM file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *repository == "" || *out == "" || fs.NArg() == 0 {
		return errors.New("sbom needs -layout, -repository, -out and the SBOM of each binary in the image")
	}
	idx, err := LayoutIndex(*dir)
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	manifest, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	var platforms []string
	for _, m := range manifest.Manifests {
		platforms = append(platforms, m.Platform.String())
	}
	var binaries []bom
	for _, path := range fs.Args() {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var b bom
		if err := json.Unmarshal(data, &b); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if b.Metadata.Component == nil {
			return fmt.Errorf("%s: no metadata.component: not an SBOM of cyclonedx-gomod bin", path)
		}
		binaries = append(binaries, b)
	}
	image := ImageSBOM(*repository, digest.String(), platforms, binaries)
	data, err := json.MarshalIndent(image, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(*out, append(data, '\n'), 0o644)
}

// ImageSBOM is the SBOM of the image index digest in repository, whose
// images are platforms: its metadata component is the index (a
// container, by its OCI package URL), its components the binary (once,
// with the platforms it is built for) and every module of any of the
// binaries, and its dependencies theirs plus the image's on the binary.
func ImageSBOM(repository, digest string, platforms []string, binaries []bom) bom {
	name := repository[strings.LastIndex(repository, "/")+1:]
	purl := "pkg:oci/" + name + "@" + url.PathEscape(digest) + "?repository_url=" + url.QueryEscape(repository)
	image := &component{
		BOMRef:  purl,
		Type:    "container",
		Name:    repository,
		Version: digest,
		PURL:    purl,
	}
	for _, p := range platforms {
		image.Properties = append(image.Properties, property{Name: "webhook-guard:image:platform", Value: p})
	}
	out := bom{
		Schema:      binaries[0].Schema,
		BOMFormat:   "CycloneDX",
		SpecVersion: binaries[0].SpecVersion,
		Version:     1,
		Metadata:    bomMetadata{Tools: binaries[0].Metadata.Tools, Component: image},
	}
	components := map[string]component{}
	depends := map[string][]string{}
	var apps []string
	for _, b := range binaries {
		app := *b.Metadata.Component
		if _, ok := components[app.BOMRef]; !ok {
			app.Properties = nil
			app.PURL = stripQualifiers(app.PURL, "goos", "goarch")
			components[app.BOMRef] = app
			apps = append(apps, app.BOMRef)
		}
		for _, p := range b.Metadata.Properties {
			if strings.HasPrefix(p.Name, "cdx:gomod:binary:hash:SHA-256") || strings.HasPrefix(p.Name, "cdx:gomod:build:env:GO") {
				c := components[app.BOMRef]
				c.Properties = append(c.Properties, p)
				components[app.BOMRef] = c
			}
		}
		for _, c := range b.Components {
			if _, ok := components[c.BOMRef]; !ok {
				c.PURL = stripQualifiers(c.PURL, "goos", "goarch")
				components[c.BOMRef] = c
			}
		}
		for _, d := range b.Dependencies {
			for _, on := range d.DependsOn {
				if !slices.Contains(depends[d.Ref], on) {
					depends[d.Ref] = append(depends[d.Ref], on)
				}
			}
			if _, ok := depends[d.Ref]; !ok {
				depends[d.Ref] = nil
			}
		}
	}
	depends[image.BOMRef] = apps
	for _, ref := range slices.Sorted(maps.Keys(components)) {
		out.Components = append(out.Components, components[ref])
	}
	for _, ref := range slices.Sorted(maps.Keys(depends)) {
		on := slices.Clone(depends[ref])
		slices.Sort(on)
		out.Dependencies = append(out.Dependencies, bomDependsOn{Ref: ref, DependsOn: on})
	}
	return out
}

// stripQualifiers removes the named qualifiers from a package URL: a
// module of the image is the same module on every platform.
func stripQualifiers(purl string, names ...string) string {
	base, query, ok := strings.Cut(purl, "?")
	if !ok {
		return purl
	}
	query, fragment, hasFragment := strings.Cut(query, "#")
	var kept []string
	for q := range strings.SplitSeq(query, "&") {
		k, _, _ := strings.Cut(q, "=")
		if !slices.Contains(names, k) {
			kept = append(kept, q)
		}
	}
	s := base
	if len(kept) > 0 {
		s += "?" + strings.Join(kept, "&")
	}
	if hasFragment {
		s += "#" + fragment
	}
	return s
}

// UnmarshalJSON keeps the fields component does not name in Rest.
func (c *component) UnmarshalJSON(data []byte) error {
	type plain component
	if err := json.Unmarshal(data, (*plain)(c)); err != nil {
		return err
	}
	if err := json.Unmarshal(data, &c.Rest); err != nil {
		return err
	}
	for _, k := range []string{"bom-ref", "type", "name", "version", "purl", "properties", "components"} {
		delete(c.Rest, k)
	}
	return nil
}

// MarshalJSON writes the named fields and Rest.
func (c component) MarshalJSON() ([]byte, error) {
	type plain component
	named, err := json.Marshal(plain(c))
	if err != nil {
		return nil, err
	}
	if len(c.Rest) == 0 {
		return named, nil
	}
	all := map[string]json.RawMessage{}
	if err := json.Unmarshal(named, &all); err != nil {
		return nil, err
	}
	for k, v := range c.Rest {
		all[k] = v
	}
	return json.Marshal(all)
}
