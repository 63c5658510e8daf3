package skill

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ManifestFile is the file that makes a folder a skill.
const ManifestFile = "SKILL.md"

// Limits of a manifest.
const (
	// MaxNameLen bounds a skill's name.
	MaxNameLen = 64
	// MaxDescriptionLen bounds a skill's description, in characters.
	MaxDescriptionLen = 1024
	// MaxManifestBytes bounds SKILL.md.
	MaxManifestBytes = 1 << 20
)

var namePattern = regexp.MustCompile(`^[a-z0-9-]+$`)

// Manifest is what a SKILL.md says.
type Manifest struct {
	Name         string
	Description  string
	Instructions string // the body after the front matter, trimmed
}

// ParseManifest reads a SKILL.md: a front matter block between "---"
// lines holding YAML-style "key: value" pairs (plain, quoted or block
// scalars; keys other than name and description are ignored), then the
// instructions. It checks the syntax only; Validate checks the values.
func ParseManifest(b []byte) (Manifest, error) {
	if len(b) > MaxManifestBytes {
		return Manifest{}, fmt.Errorf("%s is %d bytes, more than %d", ManifestFile, len(b), MaxManifestBytes)
	}
	if !utf8.Valid(b) {
		return Manifest{}, fmt.Errorf("%s is not UTF-8 text", ManifestFile)
	}
	text := strings.ReplaceAll(string(bytes.TrimPrefix(b, []byte("\uFEFF"))), "\r\n", "\n")
	lines := strings.Split(text, "\n")
	if strings.TrimRight(lines[0], " \t") != "---" {
		return Manifest{}, fmt.Errorf("%s has no front matter: its first line must be --- followed by name: and description: lines and a closing ---", ManifestFile)
	}
	end := -1
	for i := 1; i < len(lines); i++ {
		if l := strings.TrimRight(lines[i], " \t"); l == "---" || l == "..." {
			end = i
			break
		}
	}
	if end < 0 {
		return Manifest{}, fmt.Errorf("%s: the front matter is not closed by a --- line", ManifestFile)
	}
	fields, err := parseFrontMatter(lines[1:end])
	if err != nil {
		return Manifest{}, fmt.Errorf("%s front matter: %w", ManifestFile, err)
	}
	return Manifest{
		Name:         fields["name"],
		Description:  fields["description"],
		Instructions: strings.TrimSpace(strings.Join(lines[end+1:], "\n")),
	}, nil
}

// Validate reports the first problem of m, in words a skill author can act on.
func (m Manifest) Validate() error {
	switch {
	case m.Name == "":
		return fmt.Errorf("%s has no name: add a line name: <lower-case-name> to its front matter", ManifestFile)
	case len(m.Name) > MaxNameLen:
		return fmt.Errorf("%s: name %q is longer than %d characters", ManifestFile, m.Name, MaxNameLen)
	case !namePattern.MatchString(m.Name):
		return fmt.Errorf("%s: name %q may hold only lower-case letters, digits and hyphens ([a-z0-9-]+)", ManifestFile, m.Name)
	case strings.TrimSpace(m.Description) == "":
		return fmt.Errorf("%s has no description: add a line description: <what the skill does and when to use it> to its front matter", ManifestFile)
	case utf8.RuneCountInString(m.Description) > MaxDescriptionLen:
		return fmt.Errorf("%s: the description is longer than %d characters", ManifestFile, MaxDescriptionLen)
	case m.Instructions == "":
		return fmt.Errorf("%s has no instructions: write them below the front matter", ManifestFile)
	}
	return nil
}

// parseFrontMatter reads top-level "key: value" pairs. A value is plain
// (continued on more-indented lines, folded with spaces; " #" starts a
// comment), single- or double-quoted, or a block scalar (| keeps line
// breaks, > folds them). Nested mappings and lists under a key are read as
// that key's text and ignored by the caller.
func parseFrontMatter(lines []string) (map[string]string, error) {
	out := map[string]string{}
	for i := 0; i < len(lines); {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			i++
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, fmt.Errorf("line %d is indented but continues no key", i+1)
		}
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("line %d is not key: value", i+1)
		}
		key = strings.TrimSpace(key)
		value = strings.TrimSpace(value)
		// The lines that belong to this key: indented ones and blanks.
		j := i + 1
		for j < len(lines) && (strings.TrimSpace(lines[j]) == "" || lines[j][0] == ' ' || lines[j][0] == '\t') {
			j++
		}
		more := lines[i+1 : j]
		v, err := scalar(value, more)
		if err != nil {
			return nil, fmt.Errorf("%s (line %d): %w", key, i+1, err)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%s is given twice (line %d)", key, i+1)
		}
		out[key] = v
		i = j
	}
	return out, nil
}

// scalar returns the value of a key whose text after the colon is first
// and whose continuation lines are more.
func scalar(first string, more []string) (string, error) {
	switch {
	case first != "" && (first[0] == '|' || first[0] == '>'):
		return block(first, more), nil
	case strings.HasPrefix(first, `"`):
		raw := strings.Join(append([]string{first}, trimAll(more)...), " ")
		raw = strings.TrimSpace(raw)
		if len(raw) < 2 || !strings.HasSuffix(raw, `"`) {
			return "", fmt.Errorf("the double-quoted value is not closed")
		}
		v, err := strconv.Unquote(raw)
		if err != nil {
			// YAML escapes are close to Go's; keep the text of one Go
			// cannot read rather than refuse it.
			return raw[1 : len(raw)-1], nil
		}
		return v, nil
	case strings.HasPrefix(first, "'"):
		raw := strings.TrimSpace(strings.Join(append([]string{first}, trimAll(more)...), " "))
		if len(raw) < 2 || !strings.HasSuffix(raw, "'") {
			return "", fmt.Errorf("the single-quoted value is not closed")
		}
		return strings.ReplaceAll(raw[1:len(raw)-1], "''", "'"), nil
	}
	parts := []string{stripComment(first)}
	for _, l := range trimAll(more) {
		parts = append(parts, stripComment(l))
	}
	return strings.TrimSpace(strings.Join(strings.Fields(strings.Join(parts, " ")), " ")), nil
}

// block reads a | or > block scalar (chomping indicators - and + are
// accepted; the value is trimmed either way).
func block(header string, more []string) string {
	indent := -1
	var kept []string
	for _, l := range more {
		if strings.TrimSpace(l) == "" {
			kept = append(kept, "")
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " \t"))
		if indent < 0 || n < indent {
			indent = n
		}
		kept = append(kept, l)
	}
	for i, l := range kept {
		if len(l) >= indent && indent > 0 {
			kept[i] = l[indent:]
		}
	}
	if header[0] == '|' {
		return strings.TrimSpace(strings.Join(kept, "\n"))
	}
	// Folded: lines join with spaces, blank lines are paragraph breaks.
	var b strings.Builder
	for i, l := range kept {
		switch {
		case l == "":
			b.WriteString("\n")
		case i > 0 && kept[i-1] != "":
			b.WriteString(" " + l)
		default:
			b.WriteString(l)
		}
	}
	return strings.TrimSpace(b.String())
}

func trimAll(lines []string) []string {
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		if t := strings.TrimSpace(l); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// stripComment drops a " #" comment from a plain value.
func stripComment(s string) string {
	if strings.HasPrefix(s, "#") {
		return ""
	}
	if i := strings.Index(s, " #"); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, "\t#"); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}
