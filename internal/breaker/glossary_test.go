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
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	decisions, err := filepath.Glob("decide/*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, decisions...)
	var source strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || filepath.Base(f) == "doc.go" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		source.Write(data)
	}
	declared := func(name string) bool {
		return regexp.MustCompile(`(?m)(func (\([^)]*\) )?` + name + `\(|^\s+` + name + `\s|\b` + name + `\s*=|type ` + name + `\s)`).MatchString(source.String())
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
