package docs_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// userDocExempt are user docs the lint does not read, by path, each with
// why. None today.
var userDocExempt = map[string]string{}

// historyWord is a phrase that tells how the project got here rather than
// what the product does: a user doc or a comment speaks of the product and
// its versions, and the history belongs in commit messages and the design
// notes (docs/design/).
type historyWord struct {
	what string
	re   *regexp.Regexp
	// advice says what to write instead.
	advice string
}

var (
	issueNumber = historyWord{"an issue number",
		regexp.MustCompile(`(?i)\bissues?\s+#?\d+\b|(?:^|[\s(\[,;])#\d+(?:[^\w-]|$)`),
		"say what the product does, or which version changed it"}
	workDay = historyWord{"a day of work or a session",
		regexp.MustCompile(`(?i)\b(?:day|session)\s+\d+\b|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last|previous|next|this|that|one|each|every|same|earlier|later)\s+(?:session|work\s?day|day\s+of\s+work)(?:'?s)?\b|\bdays?\s+of\s+work\b`),
		"say which version, or leave the time out"}
	thisMachine = historyWord{`"this machine"`,
		regexp.MustCompile(`(?i)\bthis\s+(?:[\w.-]+\s+)?machine\b`),
		"name the hardware (for example \"a 2-core machine\")"}
	asBefore = historyWord{`"as before" or "before this change"`,
		regexp.MustCompile(`(?i)\bas\s+before\b|\bbefore\s+this\s+change\b`),
		"say as what: the behaviour, or the version it was the behaviour of"}
)

// commitHash is 7 to 40 hexadecimal characters with at least one letter
// and one digit (checked apart), as git abbreviates a commit; sha256:
// digests are removed before looking.
var (
	hexWord   = regexp.MustCompile(`\b[0-9a-fA-F]{7,40}\b`)
	hasLetter = regexp.MustCompile(`[a-fA-F]`)
	hasDigit  = regexp.MustCompile(`[0-9]`)
	digest    = regexp.MustCompile(`(?i)sha(?:256|512):[0-9a-f]+`)
)

// commitHashes returns the words of line that look like commit hashes.
func commitHashes(line string) []string {
	var hashes []string
	for _, w := range hexWord.FindAllString(digest.ReplaceAllString(line, " "), -1) {
		if hasLetter.MatchString(w) && hasDigit.MatchString(w) {
			hashes = append(hashes, w)
		}
	}
	return hashes
}

// userDocs lists the Markdown files a user reads: README.md, docs/*.md
// (the design notes in docs/design/ aside: they record why, and when) and
// the chart's README, less userDocExempt.
func userDocs(t *testing.T) []string {
	t.Helper()
	var docs []string
	for _, f := range markdownFiles(t) {
		if f == "README.md" || f == "deploy/helm/webhook-guard/README.md" ||
			path.Dir(f) == "docs" && strings.HasSuffix(f, ".md") {
			if _, exempt := userDocExempt[f]; !exempt {
				docs = append(docs, f)
			}
		}
	}
	if !slices.Contains(docs, "README.md") || !slices.Contains(docs, "docs/operating.md") {
		t.Fatalf("the user docs found are %v; the list is broken", docs)
	}
	return docs
}

// TestUserDocs_speakOfTheProduct fails on development history in the docs
// a user reads: an issue number ("issue N", "#N"), a day of work or a
// session, a commit hash, "this machine", "as before" or "before this
// change". Fenced code is read too, but for commit hashes only prose and
// code spans are: a UID or a digest in an example is not a commit.
func TestUserDocs_speakOfTheProduct(t *testing.T) {
	words := []historyWord{issueNumber, workDay, thisMachine, asBefore}
	for _, file := range userDocs(t) {
		data, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(data), "\n") {
			for _, w := range words {
				if m := w.re.FindString(line); m != "" {
					t.Errorf("%s:%d: %s (%q): %s", file, n+1, w.what, strings.TrimSpace(m), w.advice)
				}
			}
		}
		proseLines(data, func(n int, raw, _ string) {
			for _, h := range commitHashes(raw) {
				t.Errorf("%s:%d: a commit hash (%s): say which version, not which commit", file, n, h)
			}
		})
	}
}

// TestUserDocs_goCommentsSpeakOfTheCode fails on the same history words
// ("issue N", "#N", "as before", "before this change") in the comments of
// the non-test Go files under cmd/ and internal/: a comment says what the
// code does and why, not what it did before.
func TestUserDocs_goCommentsSpeakOfTheCode(t *testing.T) {
	words := []historyWord{issueNumber, asBefore}
	fset := token.NewFileSet()
	files := 0
	for _, dir := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			files++
			f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, group := range f.Comments {
				for _, c := range group.List {
					for i, line := range strings.Split(c.Text, "\n") {
						for _, w := range words {
							if m := w.re.FindString(line); m != "" {
								pos := fset.Position(c.Pos())
								rel := strings.TrimPrefix(filepath.ToSlash(pos.Filename), repoRoot+"/")
								t.Errorf("%s:%d: %s (%q) in a comment: %s", rel, pos.Line+i, w.what, strings.TrimSpace(m), w.advice)
							}
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 20 {
		t.Fatalf("read %d Go files under cmd/ and internal/; the walk is broken", files)
	}
}

func TestUserDocs_historyWordsFindWhatTheyName(t *testing.T) {
	// numbered puts a number where <n> stands, so that the examples of
	// issue numbers are not themselves citations in this file.
	numbered := func(s string) string { return strings.ReplaceAll(s, "<n>", "31") }
	for name, tc := range map[string]struct {
		line string
		word historyWord
		want bool
	}{
		"an issue by number":                  {numbered("fixed in issue <n>, see there"), issueNumber, true},
		"an issue by hash sign":               {numbered("the fix (#<n>) made it faster"), issueNumber, true},
		"issues by number":                    {numbered("issues #<n> and #<n>"), issueNumber, true},
		"not a numbered anchor":               {"see [Write it](#1-write-your-configuration)", issueNumber, false},
		"not a heading":                       {"### 1. Write your configuration", issueNumber, false},
		"not cert-manager issuing":            {"cert-manager issues the metrics certificate", issueNumber, false},
		"a session":                           {"measured in the third session", workDay, true},
		"this session's change":               {"the build before this session's change", workDay, true},
		"a day of work":                       {"on day 3 the figures moved", workDay, true},
		"not the bad day":                     {"on the bad day the seats are full", workDay, false},
		"this machine":                        {"on this machine it took 7 s", thisMachine, true},
		"this 2-core machine":                 {"on this 2-core machine it took 7 s", thisMachine, true},
		"not a 2-core machine":                {"on a 2-core machine it took 7 s", thisMachine, false},
		"as before":                           {"the breaker works as before", asBefore, true},
		"before this change":                  {"measured before this change", asBefore, true},
		"not as it was before the guard came": {"as it was before the guard first touched it", asBefore, false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := tc.word.re.MatchString(tc.line); got != tc.want {
				t.Errorf("%s in %q: %v, want %v", tc.word.what, tc.line, got, tc.want)
			}
		})
	}
	for line, want := range map[string][]string{
		"Before that (up to commit d996bcd) 12 rows disagreed":         {"d996bcd"},
		"image@sha256:0123456789abcdef0123456789abcdef":                nil,
		"deadbeef is all letters, 20261203 all digits":                 nil,
		"a 40-character hash 0a1b2c3d4e5f60718293a4b5c6d7e8f901234567": {"0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"},
	} {
		if got := commitHashes(line); !slices.Equal(got, want) {
			t.Errorf("commitHashes(%q) = %q, want %q", line, got, want)
		}
	}
}
