package approval

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"
)

// Risk levels shown to the person who answers (PROTOCOL.md §5).
const (
	RiskLow    = "low"
	RiskMedium = "medium"
	RiskHigh   = "high"
)

// Request is one question the broker put to a person: the params of the
// approval.request server → client request and of approval.pending, plus
// what the broker keeps to route and record it.
type Request struct {
	RequestID  string // "ap-…"
	SessionID  string
	TurnID     string
	CallID     string
	Tool       string
	Args       json.RawMessage // always a JSON object
	Tag        Tag
	Risk       string // RiskLow, RiskMedium or RiskHigh
	TimeoutSec int
	// ScopeHint is the allowlist pattern an allow with scope session,
	// project or always adds; "" when no pattern can cover the call (then
	// such an answer counts as once).
	ScopeHint string
	Note      string

	// Origin is the approver the request was sent to; "" means it is in the
	// unattended queue, where anyone authenticated may answer it.
	Origin    string
	Workdir   string
	JobID     string
	CreatedAt time.Time
	Deadline  time.Time

	// Questions, when set, make the request a question the agent asks
	// (ask_user, "q-…" ids) rather than an approval: it is answered with
	// the labels or words of an answer per question, and an allow means
	// answered, a deny declined.
	Questions []UserQuestion `json:",omitempty"`
}

// UserQuestion is one question of the agent's to a person, with the
// answers it offers (the person may answer in their own words).
type UserQuestion struct {
	Question string
	Header   string         `json:",omitempty"`
	Options  []AnswerOption `json:",omitempty"`
	Multiple bool           `json:",omitempty"` // several options may be chosen
}

// AnswerOption is one answer a question offers.
type AnswerOption struct {
	Label       string
	Description string `json:",omitempty"`
}

// IsQuestion reports whether the request is a question (ask_user) rather
// than an approval request.
func (r Request) IsQuestion() bool { return r.Questions != nil }

// Interactive reports whether the request went to its session's origin
// approver rather than to the unattended queue.
func (r Request) Interactive() bool { return r.Origin != "" }

// riskOf rates a call: reading is low; changing files, reaching the network,
// sending and delegating are medium; running commands, configuration,
// secrets and anything unknown are high.
func riskOf(tool string, tag Tag) string {
	if tool == "shell" {
		return RiskHigh
	}
	switch tag {
	case TagRead:
		return RiskLow
	case TagWrite, TagNetwork, TagSend, TagDelegate:
		return RiskMedium
	}
	return RiskHigh
}

// argsObject returns args when they are a JSON object, else {} (the wire
// field is an object; the tool rejects bad args itself when it runs).
func argsObject(args json.RawMessage) json.RawMessage {
	var obj map[string]json.RawMessage
	if len(args) > 0 && json.Unmarshal(args, &obj) == nil && obj != nil {
		return args
	}
	return json.RawMessage(`{}`)
}

// noteFor says in a sentence why a person is asked and who may answer.
func noteFor(q Question, interactive bool) string {
	var b strings.Builder
	if q.Mode != "" {
		fmt.Fprintf(&b, "mode %s asks before %s tools such as %s", q.Mode, q.Tag, q.Tool)
	} else {
		fmt.Fprintf(&b, "%s (%s) needs approval", q.Tool, q.Tag)
	}
	switch {
	case q.JobID != "":
		fmt.Fprintf(&b, "; scheduled job %s runs unattended: anyone may answer with approval.respond", q.JobID)
	case !interactive:
		b.WriteString("; no approver is attached to the session's origin: anyone may answer with approval.respond")
	}
	return b.String()
}

// ScopeHint returns the allowlist pattern that an allow with a wider scope
// than once adds for a call, or "" when none can (configuration calls are
// never allowlisted). The pattern always covers the call itself:
//   - shell: the command's first word, and its second when it reads like a
//     subcommand, followed by * (`shell(git status*)`); the exact command
//     when it holds shell control characters or starts with a program
//     whose name says little about what it does (rm, sudo, sh, python, …);
//   - file tools: the parent directory of the path (`write_file(src/**)`),
//     or the exact path for a file at the top of the workdir or outside it;
//   - web_fetch: the site (`web_fetch(https://go.dev/**)`);
//   - any other tool: the tool name, which covers every call of it.
func ScopeHint(tool string, tag Tag, args json.RawMessage, workdir string) string {
	if tag == TagConfig {
		return ""
	}
	var candidates []string
	switch tool {
	case "shell", "read_file", "list_dir", "grep", "write_file", "edit_file", "glob", "web_fetch":
		subject, ok := PrimaryArg(tool, args, workdir)
		if !ok || subject == "" {
			return ""
		}
		switch tool {
		case "shell":
			candidates = commandHints(subject)
		case "web_fetch":
			candidates = urlHints(subject)
		case "glob":
			candidates = []string{escapeDoublestar(subject)}
		default:
			candidates = pathHints(subject)
		}
	default:
		candidates = []string{""}
	}
	for _, glob := range candidates {
		s := tool
		if glob != "" {
			s += "(" + glob + ")"
		}
		p, err := ParsePattern(s)
		if err == nil && p.Matches(tool, args, workdir) {
			return p.String()
		}
	}
	return ""
}

// opaquePrograms are commands whose first words say little about what the
// command does, so a hint never widens beyond the exact command.
var opaquePrograms = map[string]bool{
	"rm": true, "sudo": true, "su": true, "doas": true, "dd": true, "mkfs": true,
	"sh": true, "bash": true, "zsh": true, "fish": true, "dash": true, "eval": true, "exec": true,
	"env": true, "xargs": true, "nohup": true, "timeout": true, "watch": true,
	"python": true, "python3": true, "node": true, "perl": true, "ruby": true, "php": true,
	"curl": true, "wget": true, "ssh": true, "scp": true, "chmod": true, "chown": true,
	"mv": true, "kill": true, "pkill": true, "killall": true, "find": true,
}

func commandHints(cmd string) []string {
	exact := escapeSimple(cmd)
	if strings.ContainsAny(cmd, ";&|<>`\n\r") || strings.Contains(cmd, "$(") {
		return []string{exact}
	}
	words := strings.Fields(cmd)
	if len(words) == 0 || opaquePrograms[path.Base(words[0])] {
		return []string{exact}
	}
	prefix := words[0]
	if len(words) > 1 && isSubcommand(words[1]) {
		prefix += " " + words[1]
	}
	return []string{escapeSimple(prefix) + "*", exact}
}

// isSubcommand reports whether w reads like `status` in `git status`
// rather than a flag, a path or an argument.
func isSubcommand(w string) bool {
	if w == "" || w[0] < 'a' || w[0] > 'z' {
		return false
	}
	for _, r := range w {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == ':') {
			return false
		}
	}
	return true
}

func pathHints(rel string) []string {
	exact := escapeDoublestar(rel)
	if strings.HasPrefix(rel, "/") || rel == "." {
		return []string{exact}
	}
	dir := path.Dir(rel)
	if dir == "." {
		return []string{exact}
	}
	return []string{escapeDoublestar(dir) + "/**", exact}
}

func urlHints(raw string) []string {
	exact := escapeDoublestar(raw)
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" || u.User != nil {
		return []string{exact}
	}
	return []string{escapeDoublestar(u.Scheme+"://"+u.Host) + "/**", exact}
}

// escapeSimple makes s literal in a shell or JSON glob.
func escapeSimple(s string) string {
	return escapeAny(s, `*?\`)
}

// escapeDoublestar makes s literal in a doublestar glob.
func escapeDoublestar(s string) string {
	return escapeAny(s, `*?[]{}\`)
}

func escapeAny(s, special string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(special, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
