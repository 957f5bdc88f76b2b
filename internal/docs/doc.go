// Package docs holds the tests that keep the repository's Markdown honest:
// every relative link and anchor resolves, every Markdown file that any
// text names (a Go comment, a YAML file, a code span) exists in the
// repository, and every Event reason the code emits is in the Events table
// of docs/operating.md. The user docs (README.md, docs/*.md, the chart's
// README) and the Go comments under cmd/ and internal/ speak of the
// product, not of its development: no issue numbers, sessions, commit
// hashes or "this machine" (TestUserDocs_*, also run by make lint). It has
// no code of its own; the tests run in make unit.
package docs
