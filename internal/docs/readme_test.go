package docs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// readmeMaxLines bounds the README: a guide (the two commands, what it is
// for, a quickstart, links), not the reference. Tables and results go in
// docs/.
const readmeMaxLines = 250

func TestReadme_staysAGuide(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte("\n")); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move tables and results into docs/", n, readmeMaxLines)
	}
	for _, cmd := range []string{"make demo", "make test"} {
		if !bytes.Contains(data[:min(len(data), 400)], []byte(cmd)) {
			t.Errorf("README.md does not open with %q", cmd)
		}
	}
}
