package docs_test

import (
	"bufio"
	"bytes"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository's top directory, relative to this package.
const repoRoot = "../.."

// TestMarkdown_relativeLinksResolve checks every relative link in every
// Markdown file of the repository: the file or folder it names exists, and
// an #anchor (in the same file, or in another Markdown file) matches one of
// the target's headings, by GitHub's slug rules, or an explicit
// <a id=...> or <a name=...>. http(s) and other absolute links are not
// followed.
func TestMarkdown_relativeLinksResolve(t *testing.T) {
	files := markdownFiles(t)
	if !slices.Contains(files, "README.md") {
		t.Fatalf("README.md is not among the Markdown files found: %v", files)
	}
	anchors := map[string]map[string]bool{} // by repository-relative path
	anchorsOf := func(rel string) map[string]bool {
		if a, ok := anchors[rel]; ok {
			return a
		}
		data, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		anchors[rel] = markdownAnchors(data)
		return anchors[rel]
	}
	checked := 0
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(data) {
			target := l.target
			if isAbsolute(target) {
				continue
			}
			checked++
			where := file + ":" + itoa(l.line)
			pathPart, anchor, _ := strings.Cut(target, "#")
			if p, err := url.PathUnescape(pathPart); err == nil {
				pathPart = p
			}
			if a, err := url.PathUnescape(anchor); err == nil {
				anchor = a
			}
			pathPart, _, _ = strings.Cut(pathPart, "?")
			rel := file
			if pathPart != "" {
				if strings.HasPrefix(pathPart, "/") {
					rel = path.Clean(strings.TrimPrefix(pathPart, "/"))
				} else {
					rel = path.Join(path.Dir(file), pathPart)
				}
				if rel == ".." || strings.HasPrefix(rel, "../") {
					t.Errorf("%s: link %q leaves the repository", where, target)
					continue
				}
				info, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(rel)))
				if err != nil {
					t.Errorf("%s: link %q: %s does not exist", where, target, rel)
					continue
				}
				if info.IsDir() {
					if anchor != "" {
						t.Errorf("%s: link %q: an anchor on a folder", where, target)
					}
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(strings.ToLower(rel), ".md") {
				continue // anchors into source files (#L10) are GitHub's line links
			}
			if !anchorsOf(rel)[anchor] {
				t.Errorf("%s: link %q: %s has no heading or <a id> with anchor #%s", where, target, rel, anchor)
			}
		}
	}
	t.Logf("checked %d relative links in %d Markdown files", checked, len(files))
}

// markdownFiles lists the repository's Markdown files, tracked or not yet
// committed (but not ignored), without vendor/ and testdata/ folders.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	out, err := exec.Command("git", "-C", repoRoot, "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.md").Output()
	if err == nil {
		for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f != "" {
				files = append(files, f)
			}
		}
	} else {
		// No git (a source tarball): walk the tree instead.
		err := filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && p != repoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin") {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
				rel, _ := filepath.Rel(repoRoot, p)
				files = append(files, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	files = slices.DeleteFunc(files, func(f string) bool {
		for _, dir := range strings.Split(path.Dir(f), "/") {
			if dir == "vendor" || dir == "testdata" {
				return true
			}
		}
		// Deleted in the work tree but still in the index.
		_, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(f)))
		return err != nil
	})
	slices.Sort(files)
	return slices.Compact(files)
}

func isAbsolute(target string) bool {
	if strings.HasPrefix(target, "//") {
		return true
	}
	scheme, _, ok := strings.Cut(target, ":")
	if !ok || scheme == "" || strings.ContainsAny(scheme, "/#?") {
		return false
	}
	for _, r := range scheme {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.') {
			return false
		}
	}
	return true // http, https, mailto, ...
}

type link struct {
	line   int
	target string
}

var (
	fence       = regexp.MustCompile("^ {0,3}(```+|~~~+)")
	atxHeading  = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextUnder = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	// inlineLink is [text](target "title") or ![alt](target); the text may
	// hold one level of brackets.
	inlineLink = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	refDef     = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	htmlHref   = regexp.MustCompile(`(?i)<a\s[^>]*\bhref\s*=\s*["']([^"']*)["']`)
	htmlAnchor = regexp.MustCompile(`(?i)<a\s[^>]*\b(?:id|name)\s*=\s*["']([^"']*)["']`)
)

// proseLines calls fn with each line outside fenced code blocks, as it is
// and with its code spans blanked out.
func proseLines(data []byte, fn func(n int, raw, prose string)) {
	var inFence string
	s := bufio.NewScanner(bytes.NewReader(data))
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; s.Scan(); n++ {
		line := s.Text()
		if m := fence.FindStringSubmatch(line); m != nil {
			marker := m[1]
			switch {
			case inFence == "":
				inFence = marker
				continue
			case marker[0] == inFence[0] && len(marker) >= len(inFence):
				inFence = ""
				continue
			}
		}
		if inFence != "" {
			continue
		}
		fn(n, line, replaceCodeSpans(line, func(string) string { return " " }))
	}
}

// replaceCodeSpans replaces each `code` span of line with repl(its content).
func replaceCodeSpans(line string, repl func(code string) string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(line, '`')
		if i < 0 {
			b.WriteString(line)
			return b.String()
		}
		b.WriteString(line[:i])
		n := i
		for n < len(line) && line[n] == '`' {
			n++
		}
		ticks := line[i:n]
		end := strings.Index(line[n:], ticks)
		for end >= 0 && n+end+len(ticks) < len(line) && line[n+end+len(ticks)] == '`' {
			next := strings.Index(line[n+end+len(ticks)+1:], ticks)
			if next < 0 {
				end = -1
				break
			}
			end += len(ticks) + 1 + next
		}
		if end < 0 {
			b.WriteString(ticks) // an unmatched backtick is literal
			line = line[n:]
			continue
		}
		b.WriteString(repl(line[n : n+end]))
		line = line[n+end+len(ticks):]
	}
}

// markdownLinks returns the targets of inline links, images, reference
// definitions and HTML <a href> outside code.
func markdownLinks(data []byte) []link {
	var links []link
	proseLines(data, func(n int, _, line string) {
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			links = append(links, link{n, strings.Trim(m[1], "<>")})
		}
		if m := refDef.FindStringSubmatch(line); m != nil {
			links = append(links, link{n, strings.Trim(m[1], "<>")})
		}
		for _, m := range htmlHref.FindAllStringSubmatch(line, -1) {
			links = append(links, link{n, m[1]})
		}
	})
	return slices.DeleteFunc(links, func(l link) bool { return l.target == "" })
}

// markdownAnchors returns the anchors GitHub gives a Markdown file: one per
// heading (ATX or setext), by slug, with -1, -2, ... for repeats, and every
// <a id> or <a name>.
func markdownAnchors(data []byte) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	add := func(heading string) {
		slug := Slug(heading)
		if n, ok := seen[slug]; ok {
			seen[slug] = n + 1
			slug += "-" + itoa(n+1)
		} else {
			seen[slug] = 0
		}
		anchors[slug] = true
	}
	prev, prevIsText := "", false
	proseLines(data, func(_ int, line, prose string) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(prose, -1) {
			anchors[m[1]] = true
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			add(m[2])
			prev, prevIsText = "", false
			return
		}
		if setextUnder.MatchString(line) && prevIsText {
			add(prev)
			prev, prevIsText = "", false
			return
		}
		trimmed := strings.TrimSpace(line)
		prevIsText = trimmed != "" && !strings.HasPrefix(trimmed, "|") && !strings.HasPrefix(trimmed, ">") &&
			!strings.HasPrefix(trimmed, "- ") && !strings.HasPrefix(trimmed, "* ") && !strings.HasPrefix(trimmed, "<") &&
			!strings.HasPrefix(line, "    ")
		prev = trimmed
	})
	return anchors
}

var (
	mdLinkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]*>`)
)

// Slug is GitHub's anchor for a heading: the heading's text as rendered
// (link text kept, tags dropped), lowercased, every character but letters,
// digits, spaces, '-' and '_' dropped, and each space turned into '-'.
func Slug(heading string) string {
	// Code spans keep their text, even what looks like a tag.
	var code []string
	text := replaceCodeSpans(heading, func(c string) string {
		code = append(code, c)
		return "\x00"
	})
	text = mdLinkText.ReplaceAllString(text, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	for _, c := range code {
		text = strings.Replace(text, "\x00", c, 1)
	}
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Two signals: the probe and the apiserver's own calls":              "two-signals-the-probe-and-the-apiservers-own-calls",
		"Validating webhooks: which to list, and operators that fight back": "validating-webhooks-which-to-list-and-operators-that-fight-back",
		"`guard webhooks`":                   "guard-webhooks",
		"Listing: `guard unmutated --clear`": "listing-guard-unmutated---clear",
		"Security and threat model":          "security-and-threat-model",
		"[Linked](other.md) heading":         "linked-heading",
		"snake_case and UPPER 1.36+":         "snake_case-and-upper-136",
		"Ünïcode stays":                      "ünïcode-stays",
		"`<a id>` in code":                   "a-id-in-code",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestMarkdownAnchors(t *testing.T) {
	doc := "# Title\n\n## Events\n\ntext\n\n## Events\n\n```\n## not a heading\n```\n\n" +
		"Setext heading\n--------------\n\n<a id=\"explicit\"></a>\n\n### Events ###\n\n| a |\n| --- |\n"
	got := markdownAnchors([]byte(doc))
	for _, want := range []string{"title", "events", "events-1", "events-2", "setext-heading", "explicit"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("a heading inside a code block got an anchor: %v", got)
	}
	links := markdownLinks([]byte("see [a](a.md#x), `[b](not-a-link.md)`, ![img](i.png \"t\")\n\n```\n[c](code.md)\n```\n[ref]: ref.md\n<a href=\"h.md\">h</a>\n"))
	var targets []string
	for _, l := range links {
		targets = append(targets, l.target)
	}
	if want := []string{"a.md#x", "i.png", "ref.md", "h.md"}; !slices.Equal(targets, want) {
		t.Errorf("links = %q, want %q", targets, want)
	}
}
