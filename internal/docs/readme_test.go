package docs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readmeMaxLines bounds the README: a guide for the person who runs a
// cluster (what it does, the two commands, install, approve, see it work,
// take over and give back, uninstall, links), not the reference. Tables
// and results go in docs/.
const readmeMaxLines = 200

// readmeOrder are the README's sections, in the order a cluster
// administrator needs them.
var readmeOrder = []string{
	"## Install",
	"## Approve a webhook",
	"## See it work on your cluster",
	"## Take a webhook over, and give it back",
	"## Uninstall",
	"## Documentation",
}

func TestReadme_staysAGuide(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte("\n")); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move tables and results into docs/", n, readmeMaxLines)
	}
	text := string(data)
	last := -1
	for _, heading := range readmeOrder {
		i := strings.Index(text, "\n"+heading+"\n")
		if i < 0 {
			t.Errorf("README.md has no section %q", heading)
			continue
		}
		if i < last {
			t.Errorf("README.md's section %q is out of order; want %q", heading, readmeOrder)
		}
		last = i
	}
	// The two commands come before the install, one line each.
	intro, _, _ := strings.Cut(text, "\n"+readmeOrder[0]+"\n")
	for _, cmd := range []string{"make demo", "make test"} {
		if !strings.Contains(intro, "\n"+cmd+"   # ") {
			t.Errorf("README.md does not show %q, with a one-line comment, before %q", cmd, readmeOrder[0])
		}
	}
}
