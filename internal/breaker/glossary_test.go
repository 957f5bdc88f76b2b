package breaker

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGlossary_termsAreTheCodes: every code name the package doc's
// glossary gives a term is still declared in the package or in its
// decision package (a method or
// function, a field, a variable or a constant), so the glossary cannot
// outlive a rename.
func TestGlossary_termsAreTheCodes(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	glossary := string(doc)[strings.Index(string(doc), "# Glossary"):]
	names := regexp.MustCompile(`\b(?:[A-Z][A-Za-z]*\.)?([a-zA-Z]+[A-Z][A-Za-z]*|Observe|coalesce)\b`).FindAllStringSubmatch(glossary, -1)
	source := breakerSource(t)
	declared := func(name string) bool {
		return regexp.MustCompile(`(?m)(func (\([^)]*\) )?` + name + `\(|^\s+` + name + `\s|\b` + name + `\s*=|type ` + name + `\s)`).MatchString(source)
	}
	checked := 0
	for _, m := range names {
		name := m[1]
		if name == "ModeObserve" || name == "TestGlossary" || strings.HasPrefix(name, "termsAre") {
			continue // config's, and this test's
		}
		checked++
		if !declared(name) {
			t.Errorf("the glossary names %s, which the package no longer declares", name)
		}
	}
	if checked < 10 {
		t.Fatalf("read %d names from the glossary; the doc lost its code names", checked)
	}
}

// TestWalk_namesTheCode: the walk from a failed probe to its patch in
// docs/how-it-works.md has at most six steps, each file it names exists,
// and each function or method it names is declared in the breaker or its
// decision package.
func TestWalk_namesTheCode(t *testing.T) {
	doc, err := os.ReadFile("../../docs/how-it-works.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "### From a failed probe to its patch")
	if start < 0 {
		t.Fatal("docs/how-it-works.md has no walk from a failed probe to its patch")
	}
	walk := text[start:]
	walk = walk[:strings.Index(walk[4:], "\n## ")+4]
	steps := regexp.MustCompile(`(?m)^\d+\. `).FindAllStringIndex(walk, -1)
	if len(steps) == 0 || len(steps) > 6 {
		t.Fatalf("the walk has %d steps; want 1 to 6", len(steps))
	}
	source := breakerSource(t)
	for _, file := range regexp.MustCompile("`((?:internal/breaker/)?[a-z_/]+\\.go)`").FindAllStringSubmatch(walk, -1) {
		path := strings.TrimPrefix(file[1], "internal/breaker/")
		if _, err := os.Stat(path); err != nil {
			t.Errorf("the walk names %s, which does not exist", file[1])
		}
	}
	checked := 0
	for _, name := range regexp.MustCompile("`(?:[A-Za-z]+\\.)?([A-Za-z]+)`").FindAllStringSubmatch(walk, -1) {
		n := name[1]
		switch {
		case strings.HasSuffix(name[0], ".go`"):
			continue // a file, checked above
		case n == "decide", n == "context", n == "CircuitOpened":
			continue // a package and an Event reason, not functions
		}
		checked++
		if !regexp.MustCompile(`func (\([^)]*\) )?` + n + `\(`).MatchString(source) {
			t.Errorf("the walk names %s, which is no function or method of the breaker or decide", name[0])
		}
	}
	if checked < 10 {
		t.Fatalf("read %d names from the walk; it lost its code names", checked)
	}
}

// breakerSource is the source of the breaker's and decide's non-test
// files, but their package docs.
func breakerSource(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	decisions, err := filepath.Glob("decide/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var source strings.Builder
	for _, f := range append(files, decisions...) {
		if strings.HasSuffix(f, "_test.go") || filepath.Base(f) == "doc.go" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		source.Write(data)
	}
	return source.String()
}
