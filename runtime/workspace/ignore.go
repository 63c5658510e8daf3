package workspace

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// IgnoreFiles are the files at the root whose lines are ignore rules, in
// the order they apply.
var IgnoreFiles = []string{".gitignore", ".trellisignore"}

// DefaultIgnore are the rules every snapshot applies before the root's
// ignore files: a repository's own database is not the workspace.
var DefaultIgnore = []string{".git/"}

// ReadIgnore returns the rules a snapshot of root applies: DefaultIgnore,
// then the lines of root's IgnoreFiles that hold a rule.
func ReadIgnore(root string) []string {
	rules := append([]string(nil), DefaultIgnore...)
	for _, name := range IgnoreFiles {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), " \t\r")
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			rules = append(rules, line)
		}
	}
	return rules
}

// matcher applies .gitignore-style rules to paths relative to the root:
// "#" comments, "!" negates, a trailing "/" matches directories only, a
// rule holding "/" elsewhere is anchored at the root, one without matches
// at any depth, and "*", "?", "[...]" and "**" glob. The last rule that
// matches decides. Rules of nested .gitignore files are not read.
type matcher struct{ rules []rule }

type rule struct {
	glob    string
	negate  bool
	dirOnly bool
}

func newMatcher(lines []string) matcher {
	var m matcher
	for _, l := range lines {
		r := rule{}
		if strings.HasPrefix(l, "!") {
			r.negate, l = true, l[1:]
		} else if strings.HasPrefix(l, `\!`) || strings.HasPrefix(l, `\#`) {
			l = l[1:]
		}
		if strings.HasSuffix(l, "/") {
			r.dirOnly, l = true, strings.TrimRight(l, "/")
		}
		if l == "" {
			continue
		}
		if strings.Contains(l, "/") {
			l = strings.TrimPrefix(l, "/")
		} else {
			l = "**/" + l
		}
		if !doublestar.ValidatePattern(l) {
			continue
		}
		r.glob = l
		m.rules = append(m.rules, r)
	}
	return m
}

// ignored reports whether rel (a directory when dir) is ignored.
func (m matcher) ignored(rel string, dir bool) bool {
	out := false
	for _, r := range m.rules {
		if r.dirOnly && !dir {
			continue
		}
		if ok, _ := doublestar.Match(r.glob, rel); ok {
			out = !r.negate
		}
	}
	return out
}

// Exclude returns the rules that leave paths (absolute: the daemon's own
// home, which holds its store and its secrets) out of a snapshot of root,
// and that a restore into root leaves alone: one rule anchored at the root
// for each path that lies inside it. They come after the root's own rules,
// so that no "!" rule brings such a path back.
func Exclude(root string, paths []string) []string {
	var rules []string
	root, _ = filepath.Abs(root) // an error leaves root as it is
	for _, p := range paths {
		p, _ = filepath.Abs(p)
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
			continue // outside root (root itself inside p is not left out: the session chose it)
		}
		rules = append(rules, "/"+globEscape(filepath.ToSlash(rel))+"/")
	}
	return rules
}

// globEscape quotes the characters a rule reads as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]{}\!#`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// under reports whether rel, or a directory it lies in, is ignored.
func (m matcher) under(rel string, dir bool) bool {
	for i := range len(rel) {
		if rel[i] == '/' && m.ignored(rel[:i], true) {
			return true
		}
	}
	return m.ignored(rel, dir)
}
