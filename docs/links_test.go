// Package docs holds the project's documentation; this test keeps its
// links honest.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The documents checked: the README and every docs/*.md.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md found (%v)", err)
	}
	return append([]string{filepath.Join("..", "README.md")}, docs...)
}

var (
	// [text](target) and ![alt](target); the target ends at a space (a
	// title may follow) or the closing parenthesis.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// [text]: target (reference definitions).
	refDef = regexp.MustCompile(`(?m)^\s{0,3}\[[^\]]+\]:\s+(\S+)`)
	// `path/in/the/repo` mentioned in code spans.
	codePath = regexp.MustCompile("`([A-Za-z0-9_.][A-Za-z0-9_./-]*/[A-Za-z0-9_./-]*)`")
	heading  = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	fence    = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```")
)

// notPaths are code spans that look like repository paths but are not
// files of a clone, with the reason.
var notPaths = map[string]string{
	"ui/test/screenshots/": "written by the web console's browser tests (git-ignored)",
	"tools/list_changed":   "an MCP notification, not a path",
}

// TestLinksResolveInsideTheRepo checks that every relative link of the
// README and docs/*.md names a file or directory of the repository (not
// outside it: a clone has nothing there), that every #anchor names a
// heading of its target, and that every repository path written in a code
// span (`docs/x.md`, `runtime/llm/fake/doc.go`) exists.
func TestLinksResolveInsideTheRepo(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	topLevel := map[string]bool{}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		topLevel[e.Name()] = true
	}
	anchorCache := map[string]map[string]bool{}
	checked := 0
	for _, doc := range documents(t) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		name, _ := filepath.Rel(root, mustAbs(t, doc))
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
			targets = append(targets, m[1])
		}
		for _, m := range refDef.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			checked++
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue // outside the repository by design; not checked offline
			}
			path, anchor, _ := strings.Cut(strings.Trim(target, "<>"), "#")
			resolved := mustAbs(t, doc)
			if path != "" {
				resolved = filepath.Join(filepath.Dir(mustAbs(t, doc)), filepath.FromSlash(path))
				if rel, err := filepath.Rel(root, resolved); err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s: link %q points outside the repository (a clone has nothing there): move what it needs into docs/", name, target)
					continue
				}
				if _, err := os.Stat(resolved); err != nil {
					t.Errorf("%s: link %q: %s does not exist", name, target, filepath.ToSlash(mustRel(t, root, resolved)))
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(resolved, ".md") {
				continue
			}
			anchors, ok := anchorCache[resolved]
			if !ok {
				anchors = headingAnchors(t, resolved)
				anchorCache[resolved] = anchors
			}
			if !anchors[anchor] {
				t.Errorf("%s: link %q: no heading of %s has the anchor #%s", name, target, filepath.ToSlash(mustRel(t, root, resolved)), anchor)
			}
		}
		for _, m := range codePath.FindAllStringSubmatch(text, -1) {
			p := strings.TrimSuffix(m[1], "/")
			first, _, _ := strings.Cut(p, "/")
			if _, ok := notPaths[m[1]]; ok || !topLevel[first] {
				continue // not a path of this repository (a Go import path, ~/.trellis/..., …)
			}
			checked++
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
				t.Errorf("%s: `%s` is not a path of the repository", name, m[1])
			}
		}
	}
	if checked == 0 {
		t.Fatal("no link was found: the patterns are broken")
	}
	t.Logf("%d links and repository paths checked", checked)
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown file: the heading's text without markup, lowercased, with every
// character but letters, digits, '-', '_' and spaces dropped and spaces
// turned into '-'; a repeated anchor gets -1, -2….
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(string(data), ""), -1) {
		a := slug(m[1])
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

var linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

func slug(h string) string {
	h = linkText.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustRel(t *testing.T, base, p string) string {
	t.Helper()
	r, err := filepath.Rel(base, p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSlug pins the anchor rule on headings of docs/protocol.md's kind.
func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"System (SystemService)":           "system-systemservice",
		"`system.hello`":                   "systemhello",
		"Error codes":                      "error-codes",
		"Modes: what a session asks about": "modes-what-a-session-asks-about",
		"[Link](x.md) text":                "link-text",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}
