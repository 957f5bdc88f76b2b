package docs_test

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	// mdMention is a Markdown file named in any text: a path such as
	// docs/design/README.md or ../static-admission/README.md, or a bare
	// name. Group 1 is what precedes it (nothing that could continue a
	// path), group 2 the name.
	mdMention = regexp.MustCompile(`(^|[^A-Za-z0-9_./-])((?:\.{1,2}/)*(?:[A-Za-z0-9_-][A-Za-z0-9_.-]*/)*[A-Za-z0-9_-][A-Za-z0-9_.-]*\.md)\b`)
	// anyURL is blanked out before looking for mentions: a URL's path is
	// another site's.
	anyURL = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>)\]]*`)
	// upperName is a bare name worth checking (DESIGN.md, STYLE.md,
	// README.md): one a reader would go looking for. Lowercase bare names
	// ("runbooks.md" in a sentence about a page) are left to the links
	// test, which resolves them where they are links.
	upperName = regexp.MustCompile(`^[A-Z][A-Z0-9_-]*\.md$`)
)

// TestReferences_mentionedMarkdownFilesExist finds every Markdown file that
// the repository's text names outside Markdown links (Go comments and
// strings, YAML, the Makefile, scripts, and code spans in Markdown), by
// path or by an upper-case name such as DESIGN.md, and requires each to
// exist, relative to the naming file's folder or to the repository's top.
// It keeps notes from citing a document that lives outside the repository
// (the design contract once did, as DESIGN.md; the design notes are now
// docs/design/).
func TestReferences_mentionedMarkdownFilesExist(t *testing.T) {
	checked := 0
	for _, file := range textFiles(t) {
		if file == "internal/docs/references_test.go" {
			continue // this file names missing files on purpose, as examples
		}
		data, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.IndexByte(data, 0) >= 0 {
			continue // binary
		}
		for n, line := range strings.Split(string(data), "\n") {
			line = anyURL.ReplaceAllString(line, " ")
			for _, m := range mdMention.FindAllStringSubmatch(line, -1) {
				name := m[2]
				if !strings.Contains(name, "/") && !upperName.MatchString(name) {
					continue
				}
				checked++
				if !mentionResolves(file, name) {
					t.Errorf("%s:%d names %s, which is not in the repository (relative to %s/ or to the top); point it at the file that holds that text now (the design notes are in docs/design/)",
						file, n+1, name, path.Dir(file))
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no mention of a Markdown file anywhere; the pattern is broken")
	}
	t.Logf("checked %d mentions of Markdown files", checked)
}

// mentionResolves reports whether name, mentioned in file, is a file
// relative to file's folder or to the repository's top.
func mentionResolves(file, name string) bool {
	for _, base := range []string{path.Dir(file), "."} {
		rel := path.Clean(path.Join(base, name))
		if rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		if info, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(rel))); err == nil && !info.IsDir() {
			return true
		}
	}
	return false
}

// textFiles lists the repository's files, tracked or not yet committed (but
// not ignored), without vendor/ and testdata/ folders, go.sum files, and
// files deleted in the work tree. Binary files are skipped by the caller.
func textFiles(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", repoRoot, "ls-files", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("no git to list the repository's files: %v", err)
	}
	var files []string
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f == "" || path.Base(f) == "go.sum" {
			continue
		}
		if slices.ContainsFunc(strings.Split(path.Dir(f), "/"), func(d string) bool { return d == "vendor" || d == "testdata" }) {
			continue
		}
		if info, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(f))); err != nil || !info.Mode().IsRegular() {
			continue
		}
		files = append(files, f)
	}
	slices.Sort(files)
	return slices.Compact(files)
}

func TestMDMention_findsPathsAndNames(t *testing.T) {
	for name, tc := range map[string]struct {
		line string
		want []string
	}{
		"a bare upper-case name in a Go comment": {`// see DESIGN.md, "The guard"`, []string{"DESIGN.md"}},
		"a path, without its anchor":             {"the design notes (docs/design/README.md#decisions)", []string{"docs/design/README.md"}},
		"a relative link and a code span":        {"[the overlay](../static-admission/README.md) and `STYLE.md`", []string{"../static-admission/README.md", "STYLE.md"}},
		"nothing in a URL":                       {"runbook_url: https://example.com/blob/main/docs/runbooks.md", nil},
		"nothing in another suffix":              {"an x.mdx file, a .md suffix alone", nil},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, m := range mdMention.FindAllStringSubmatch(anyURL.ReplaceAllString(tc.line, " "), -1) {
				got = append(got, m[2])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("mentions in %q = %q, want %q", tc.line, got, tc.want)
			}
		})
	}
}
