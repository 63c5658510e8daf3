package approval

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// Mode is a session's approval mode (PROTOCOL.md §4).
type Mode string

// The session modes.
const (
	// ModePlan reads and researches; it never changes files and asks before running commands.
	ModePlan Mode = "plan"
	// ModeAccept edits files freely and asks before commands, network, sending and config.
	ModeAccept Mode = "accept"
	// ModeAuto does everything without asking, except changing configuration.
	ModeAuto Mode = "auto"
)

// DefaultMode is the mode of a session created without one.
const DefaultMode = ModeAccept

// ErrBadMode is the cause of the error ParseMode returns for an unknown mode.
var ErrBadMode = errors.New("unknown mode")

// ParseMode returns the Mode named s. Anything but "plan", "accept" or "auto"
// (including "") is an invalid_params error wrapping ErrBadMode; callers apply
// DefaultMode themselves when the field is absent.
func ParseMode(s string) (Mode, error) {
	m := Mode(s)
	if m.Valid() {
		return m, nil
	}
	return "", errs.Wrap(errcode.InvalidParams, ErrBadMode,
		"unknown mode %q: use plan, accept or auto", s)
}

// Valid reports whether m is one of the three modes.
func (m Mode) Valid() bool {
	return m == ModePlan || m == ModeAccept || m == ModeAuto
}

// Tag is a tool's permission tag: the kind of effect a call may have.
type Tag string

// The permission tags (PROTOCOL.md §4).
const (
	TagRead     Tag = "read"     // reads files in the workdir
	TagWrite    Tag = "write"    // creates or changes files in the workdir
	TagExec     Tag = "exec"     // runs commands
	TagNetwork  Tag = "network"  // reaches the network
	TagSend     Tag = "send"     // sends messages to people or services
	TagConfig   Tag = "config"   // changes the daemon's or the project's configuration
	TagDelegate Tag = "delegate" // starts sub-agents
	TagSecret   Tag = "secret"   // reads or uses stored secrets
)

// Tags lists every permission tag, in the protocol's order.
func Tags() []Tag {
	return []Tag{TagRead, TagWrite, TagExec, TagNetwork, TagSend, TagConfig, TagDelegate, TagSecret}
}

// ErrBadTag is the cause of the error ParseTag returns for an unknown tag.
var ErrBadTag = errors.New("unknown permission tag")

// ParseTag returns the Tag named s, or an invalid_params error wrapping ErrBadTag.
func ParseTag(s string) (Tag, error) {
	t := Tag(s)
	if t.Valid() {
		return t, nil
	}
	return "", errs.Wrap(errcode.InvalidParams, ErrBadTag,
		"unknown permission tag %q: use read, write, exec, network, send, config, delegate or secret", s)
}

// Valid reports whether t is one of the protocol's permission tags.
func (t Tag) Valid() bool {
	_, ok := policy[ModeAccept][t]
	return ok
}

// Decision is what the policy says about one tool call.
type Decision int

// The decisions. The zero value is Deny, so a Decision nobody set fails closed.
const (
	Deny  Decision = iota // refuse without asking (mode_denied)
	Allow                 // run without asking
	Ask                   // ask a person (approval.request)
)

// String returns "deny", "allow" or "ask".
func (d Decision) String() string {
	switch d {
	case Allow:
		return "allow"
	case Ask:
		return "ask"
	case Deny:
		return "deny"
	}
	return "invalid"
}

// policy is the mode table of PROTOCOL.md §4, written out in full so that a
// reader can check it cell by cell.
var policy = map[Mode]map[Tag]Decision{
	ModePlan: {
		TagRead: Allow, TagNetwork: Allow,
		TagWrite: Deny, TagSend: Deny, TagConfig: Deny,
		TagExec: Ask, TagDelegate: Ask, TagSecret: Ask,
	},
	ModeAccept: {
		TagRead: Allow, TagWrite: Allow,
		TagExec: Ask, TagNetwork: Ask, TagSend: Ask, TagConfig: Ask, TagDelegate: Ask, TagSecret: Ask,
	},
	ModeAuto: {
		TagRead: Allow, TagWrite: Allow, TagExec: Allow, TagNetwork: Allow,
		TagSend: Allow, TagDelegate: Allow, TagSecret: Allow,
		TagConfig: Ask,
	},
}

// Decide returns the policy's decision for a call carrying tag in mode.
// allowlisted says whether an allowlist pattern matches the call; it only
// turns Ask into Allow, and never for TagConfig. An unknown mode or tag is
// denied (fail closed).
func Decide(mode Mode, tag Tag, allowlisted bool) Decision {
	d, ok := policy[mode][tag]
	if !ok {
		return Deny
	}
	if d == Ask && allowlisted && tag != TagConfig {
		return Allow
	}
	return d
}

// ErrBadPattern is the cause of the error ParsePattern returns.
var ErrBadPattern = errors.New("bad allowlist pattern")

// Pattern is an allowlist entry: `tool` matches every call of the tool,
// `tool(glob)` matches the calls whose primary argument (see PrimaryArg)
// matches glob.
//
// How glob matches depends on the tool:
//   - shell: the command, trimmed of surrounding space. `*` matches any run of
//     characters, spaces and slashes included, and `?` any one character,
//     except that neither ever matches a shell control character (; & | < >
//     backquote, newline) nor the `$(` of a command substitution: so
//     `shell(git status*)` matches `git status --short` but not
//     `git status; rm -rf ~`. Such characters match only when written
//     literally in the glob. `\` makes the next character literal.
//   - the file tools (read_file, list_dir, grep, write_file, edit_file) and
//     glob: doublestar syntax against the path relative to the workdir, with
//     `/` separators (`*` stays within one path segment, `**` spans any
//     number, `{a,b}` alternates). A path outside the workdir is matched in
//     its absolute form. Matching is lexical; the tools themselves refuse
//     anything that resolves outside the workdir.
//   - web_fetch: doublestar syntax against the URL, so
//     `web_fetch(https://go.dev/**)` matches every page of go.dev; write a
//     literal `?` as `\?`.
//   - any other tool: against the compact JSON of its arguments (keys
//     sorted), where `*` matches any run of characters and `?` any one.
type Pattern struct {
	Tool string
	// Glob is empty for a pattern that matches every call of Tool.
	Glob string
}

// globKind says how a tool's primary argument is matched.
type globKind int

const (
	globJSON    globKind = iota // compact JSON of the args, * spans anything
	globCommand                 // shell command, * never spans a control operator
	globPath                    // workdir-relative path, doublestar
	globURL                     // URL, doublestar
)

// primaryArgs names each built-in tool's primary argument. It mirrors the
// argument names of runtime/tool's built-ins.
var primaryArgs = map[string]struct {
	key  string
	kind globKind
}{
	"shell":      {"command", globCommand},
	"read_file":  {"path", globPath},
	"list_dir":   {"path", globPath},
	"grep":       {"path", globPath},
	"write_file": {"path", globPath},
	"edit_file":  {"path", globPath},
	"glob":       {"pattern", globPath},
	"web_fetch":  {"url", globURL},
}

func kindOf(tool string) globKind {
	if a, ok := primaryArgs[tool]; ok {
		return a.kind
	}
	return globJSON
}

// ParsePattern parses `tool` or `tool(glob)`. Surrounding space is ignored,
// the tool name is letters, digits and `_ . : -`, and the glob must be
// non-empty, free of control characters and valid for the tool's kind of
// argument. Errors are invalid_params wrapping ErrBadPattern.
func ParsePattern(s string) (Pattern, error) {
	s = strings.TrimSpace(s)
	name, glob, hasGlob := s, "", false
	if i := strings.IndexByte(s, '('); i >= 0 {
		if !strings.HasSuffix(s, ")") {
			return Pattern{}, badPattern(s, "a pattern with ( must end with )")
		}
		name, glob, hasGlob = strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:len(s)-1]), true
	}
	if name == "" {
		return Pattern{}, badPattern(s, "the tool name is missing")
	}
	for _, r := range name {
		if !isNameRune(r) {
			return Pattern{}, badPattern(s, "the tool name may hold only letters, digits and _ . : -")
		}
	}
	if !hasGlob {
		return Pattern{Tool: name}, nil
	}
	if glob == "" {
		return Pattern{}, badPattern(s, "the glob between ( and ) is empty; write just "+name+" to match every call")
	}
	for _, r := range glob {
		if r < 0x20 || r == 0x7f {
			return Pattern{}, badPattern(s, "the glob holds a control character")
		}
	}
	switch kindOf(name) {
	case globPath, globURL:
		if !doublestar.ValidatePattern(glob) {
			return Pattern{}, badPattern(s, "the glob is not valid doublestar syntax (check [ ] and { } pairs)")
		}
	default:
		if trailingEscape(glob) {
			return Pattern{}, badPattern(s, `the glob ends with a lone \`)
		}
	}
	return Pattern{Tool: name, Glob: glob}, nil
}

// trailingEscape reports whether glob ends in an odd run of backslashes.
func trailingEscape(glob string) bool {
	n := 0
	for i := len(glob) - 1; i >= 0 && glob[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

func isNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		r == '_' || r == '.' || r == ':' || r == '-'
}

func badPattern(s, why string) error {
	return errs.Wrap(errcode.InvalidParams, ErrBadPattern, "bad allowlist pattern %q: %s", s, why)
}

// String returns the pattern in the form ParsePattern reads.
func (p Pattern) String() string {
	if p.Glob == "" {
		return p.Tool
	}
	return p.Tool + "(" + p.Glob + ")"
}

// Matches reports whether a call of tool with args (a JSON object) in a
// session whose workdir is workdir is covered by the pattern.
func (p Pattern) Matches(tool string, args json.RawMessage, workdir string) bool {
	if p.Tool != tool {
		return false
	}
	if p.Glob == "" {
		return true
	}
	subject, ok := PrimaryArg(tool, args, workdir)
	if !ok {
		return false
	}
	switch kindOf(tool) {
	case globCommand:
		return matchSimple(p.Glob, subject, true)
	case globPath, globURL:
		return doublestar.MatchUnvalidated(p.Glob, subject)
	default:
		return matchSimple(p.Glob, subject, false)
	}
}

// PrimaryArg returns the string a `tool(glob)` pattern is matched against
// (see Pattern), and false when args are not a JSON object or the primary
// argument is not a string. A missing path means the workdir itself (".").
// It is also what a client can show when it suggests a pattern.
func PrimaryArg(tool string, args json.RawMessage, workdir string) (string, bool) {
	var obj map[string]any
	if len(args) == 0 || string(args) == "null" {
		obj = map[string]any{}
	} else if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		return "", false
	}
	a, known := primaryArgs[tool]
	if !known {
		b, err := json.Marshal(obj) // map keys are sorted: a canonical compact form
		if err != nil {
			return "", false
		}
		return string(b), true
	}
	v, present := obj[a.key]
	s, isString := v.(string)
	if present && !isString {
		return "", false
	}
	switch a.kind {
	case globCommand:
		return strings.TrimSpace(s), present
	case globURL:
		return s, present
	default:
		if !present || s == "" {
			s = "."
		}
		return relPath(s, workdir), true
	}
}

// relPath returns p relative to workdir with / separators when p lies inside
// it, else p cleaned (absolute when p was).
func relPath(p, workdir string) string {
	if workdir != "" && !filepath.IsAbs(p) {
		p = filepath.Join(workdir, p)
	}
	p = filepath.Clean(p)
	if workdir != "" {
		wd := filepath.Clean(workdir)
		if rel, err := filepath.Rel(wd, p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return filepath.ToSlash(rel)
		}
	}
	return filepath.ToSlash(p)
}

// matchSimple matches s against a glob of `*`, `?`, `\`-escapes and literal
// characters. With shell set, wildcards never match a shell control character
// nor the `$` of `$(`. It runs in O(len(glob)·len(s)) time.
func matchSimple(glob, s string, shell bool) bool {
	type tok struct {
		r    rune
		star bool
		any  bool
	}
	var toks []tok
	g := []rune(glob)
	for i := 0; i < len(g); i++ {
		switch g[i] {
		case '*':
			if len(toks) > 0 && toks[len(toks)-1].star {
				continue // ** is *
			}
			toks = append(toks, tok{star: true})
		case '?':
			toks = append(toks, tok{any: true})
		case '\\':
			if i+1 < len(g) {
				i++
			}
			toks = append(toks, tok{r: g[i]})
		default:
			toks = append(toks, tok{r: g[i]})
		}
	}
	text := []rune(s)
	wild := make([]bool, len(text)) // may a wildcard consume text[i]?
	for i, r := range text {
		wild[i] = !shell || !isShellControl(r) && !(r == '$' && i+1 < len(text) && text[i+1] == '(')
	}
	// prev[j]: toks[:i] matches text[:j].
	prev := make([]bool, len(text)+1)
	cur := make([]bool, len(text)+1)
	prev[0] = true
	for _, t := range toks {
		cur[0] = t.star && prev[0]
		for j := 1; j <= len(text); j++ {
			switch {
			case t.star:
				cur[j] = prev[j] || cur[j-1] && wild[j-1]
			case t.any:
				cur[j] = prev[j-1] && wild[j-1]
			default:
				cur[j] = prev[j-1] && text[j-1] == t.r
			}
		}
		prev, cur = cur, prev
	}
	return prev[len(text)]
}

func isShellControl(r rune) bool {
	switch r {
	case ';', '&', '|', '<', '>', '`', '\n', '\r':
		return true
	}
	return false
}
