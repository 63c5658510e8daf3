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
