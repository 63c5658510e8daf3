package agents

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// Sentinel errors; the errors that reach clients are *errs.Error values
// wrapping them, so both errors.Is and errs.CodeOf work.
var (
	// ErrInvalidName: a name is not [a-z0-9-]+ (invalid_params).
	ErrInvalidName = errors.New("invalid agent name")
	// ErrExists: agent.create was given the name of an existing definition
	// (invalid_params); delete it first to replace it.
	ErrExists = errors.New("agent definition exists")
	// ErrNotFound: no definition or sub-agent of that name or id (not_found).
	ErrNotFound = errors.New("agent not found")
	// ErrNested: a sub-agent tried to start a sub-agent (invalid_params).
	ErrNested = errors.New("sub-agents cannot start sub-agents")
)

// DefaultName is the name reported for the default agent (agent.spawn with
// name ""): the definition of that name when one exists, else the built-in
// agent with no extra instructions.
const DefaultName = "default"

// maxNameLen bounds an agent name.
const maxNameLen = 64

var namePattern = regexp.MustCompile(`^[a-z0-9-]+$`)

// Definition is an agent definition: front matter (name, description,
// tools, model) and a body of instructions.
type Definition struct {
	Name         string
	Description  string
	Instructions string
	Tools        []string
	Model        string
	// MCPServers is the front matter's mcpServers: a JSON object on one
	// line in the Claude Desktop format ({"NAME": {"command": …}}); the
	// servers' tools are added to the sessions of this agent.
	MCPServers json.RawMessage
	// MaxCostMicroUSD and MaxTokens are the budget of each session of the
	// definition that has none of its own (front matter maxCostMicroUsd,
	// maxTokens; nil: no limit): docs/budgets.md.
	MaxCostMicroUSD *int64
	MaxTokens       *int64
	// Path is the file the definition was read from or written to; "" for
	// the built-in default agent.
	Path string
}

// ValidName checks an agent name.
func ValidName(name string) error {
	if name == "" || len(name) > maxNameLen || !namePattern.MatchString(name) {
		return errs.Wrap(errcode.InvalidParams, ErrInvalidName,
			"agent name %q must be 1-%d characters of a-z, 0-9 and -", name, maxNameLen)
	}
	return nil
}

// Marshal renders d as a markdown file with front matter. Strings are
// written JSON-quoted, which is also valid YAML.
func (d Definition) Marshal() []byte {
	var b strings.Builder
	q := func(s string) string { j, _ := json.Marshal(s); return string(j) }
	b.WriteString("---\n")
	fmt.Fprintf(&b, "name: %s\n", q(d.Name))
	fmt.Fprintf(&b, "description: %s\n", q(d.Description))
	if len(d.Tools) > 0 {
		t, _ := json.Marshal(d.Tools)
		fmt.Fprintf(&b, "tools: %s\n", t)
	}
	if d.Model != "" {
		fmt.Fprintf(&b, "model: %s\n", q(d.Model))
	}
	if len(d.MCPServers) > 0 {
		fmt.Fprintf(&b, "mcpServers: %s\n", d.MCPServers)
	}
	if d.MaxCostMicroUSD != nil {
		fmt.Fprintf(&b, "maxCostMicroUsd: %d\n", *d.MaxCostMicroUSD)
	}
	if d.MaxTokens != nil {
		fmt.Fprintf(&b, "maxTokens: %d\n", *d.MaxTokens)
	}
	b.WriteString("---\n")
	if d.Instructions != "" {
		b.WriteString(strings.TrimRight(d.Instructions, "\n"))
		b.WriteString("\n")
	}
	return []byte(b.String())
}

// ParseDefinition reads a definition file: optional front matter between
// "---" lines (name, description, tools, model; unknown keys are ignored)
// and the body as instructions. Values may be bare, single- or
// JSON-quoted; tools is a flow list ([a, b]), a block list (- a) or
// comma-separated.
func ParseDefinition(data []byte) (Definition, error) {
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	var d Definition
	rest, ok := strings.CutPrefix(text, "---\n")
	if !ok {
		d.Instructions = strings.TrimSpace(text)
		return d, nil
	}
	var fm string
	if strings.HasPrefix(rest, "---\n") || rest == "---" {
		fm, text = "", strings.TrimPrefix(strings.TrimPrefix(rest, "---"), "\n")
	} else {
		var after string
		fm, after, ok = strings.Cut(rest, "\n---")
		if !ok {
			return d, errors.New("front matter is not closed by a --- line")
		}
		text = after
		if nl := strings.IndexByte(text, '\n'); nl >= 0 {
			text = text[nl+1:]
		} else {
			text = ""
		}
	}
	lines := strings.Split(fm, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return d, fmt.Errorf("front matter line %d has no key: %q", i+1, line)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "name":
			d.Name = scalar(v)
		case "description":
			d.Description = scalar(v)
		case "model":
			d.Model = scalar(v)
		case "maxCostMicroUsd", "maxTokens":
			n, err := strconv.ParseInt(scalar(v), 10, 64)
			if err != nil || n < 0 {
				return d, fmt.Errorf("front matter line %d: %s must be a whole number of at least 0, not %q", i+1, k, v)
			}
			if k == "maxTokens" {
				d.MaxTokens = &n
			} else {
				d.MaxCostMicroUSD = &n
			}
		case "mcpServers":
			if !json.Valid([]byte(v)) {
				return d, fmt.Errorf("front matter line %d: mcpServers must be a JSON object on one line", i+1)
			}
			d.MCPServers = json.RawMessage(v)
		case "tools":
			if v == "" {
				for i+1 < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i+1]), "-") {
					i++
					if t := scalar(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lines[i]), "-"))); t != "" {
						d.Tools = append(d.Tools, t)
					}
				}
				continue
			}
			d.Tools = list(v)
		}
	}
	d.Instructions = strings.TrimSpace(text)
	return d, nil
}

// scalar unquotes a front matter value.
func scalar(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		var s string
		if json.Unmarshal([]byte(v), &s) == nil {
			return s
		}
		return v[1 : len(v)-1]
	}
	if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
		return strings.ReplaceAll(v[1:len(v)-1], "''", "'")
	}
	return v
}

// list reads a flow list or a comma-separated value.
func list(v string) []string {
	if strings.HasPrefix(v, "[") && strings.HasSuffix(v, "]") {
		var out []string
		if json.Unmarshal([]byte(v), &out) == nil {
			return out
		}
		v = v[1 : len(v)-1]
	}
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = scalar(strings.TrimSpace(p)); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Definitions reads and writes the definitions of one directory, or, for
// several daemons on one store, the shared ones (NewSharedDefinitions).
type Definitions struct {
	dir    string
	shared SharedStore // nil: the files of dir are the definitions
}

// NewDefinitions returns the definitions kept in dir (created on demand).
func NewDefinitions(dir string) *Definitions { return &Definitions{dir: dir} }

func (s *Definitions) path(name string) string { return filepath.Join(s.dir, name+".md") }

// Create writes a new definition and returns it with its path. An existing
// name is refused (ErrExists): replacing a definition means deleting it
// first, so that a typo cannot silently overwrite someone's agent.
func (s *Definitions) Create(d Definition) (Definition, error) {
	if err := ValidName(d.Name); err != nil {
		return d, err
	}
	if strings.TrimSpace(d.Description) == "" {
		return d, errs.New(errcode.InvalidParams, "description is required: one sentence saying what agent %s does", d.Name)
	}
	for i, t := range d.Tools {
		if strings.TrimSpace(t) == "" {
			return d, errs.New(errcode.InvalidParams, "tools[%d] is empty", i)
		}
	}
	if s.shared != nil {
		return s.createShared(d)
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return d, fmt.Errorf("create %s: %w", s.dir, err)
	}
	d.Path = s.path(d.Name)
	f, err := os.OpenFile(d.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return d, errs.Wrap(errcode.InvalidParams, ErrExists, "agent %s already exists (%s): delete it first to replace it", d.Name, d.Path)
	}
	if err != nil {
		return d, fmt.Errorf("write agent %s: %w", d.Name, err)
	}
	if _, err := f.Write(d.Marshal()); err != nil {
		f.Close()
		os.Remove(d.Path)
		return d, fmt.Errorf("write agent %s: %w", d.Name, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(d.Path)
		return d, fmt.Errorf("write agent %s: %w", d.Name, err)
	}
	return d, nil
}

// Delete removes a definition.
func (s *Definitions) Delete(name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if s.shared != nil {
		return s.deleteShared(name)
	}
	err := os.Remove(s.path(name))
	if errors.Is(err, os.ErrNotExist) {
		return errs.Wrap(errcode.NotFound, ErrNotFound, "no agent named %s in %s", name, s.dir)
	}
	if err != nil {
		return fmt.Errorf("delete agent %s: %w", name, err)
	}
	return nil
}

// Get reads one definition. The file name is the agent's name, whatever
// its front matter says.
func (s *Definitions) Get(name string) (Definition, error) {
	if err := ValidName(name); err != nil {
		return Definition{}, err
	}
	if s.shared != nil {
		return s.getShared(name)
	}
	data, err := os.ReadFile(s.path(name))
	if errors.Is(err, os.ErrNotExist) {
		return Definition{}, errs.Wrap(errcode.NotFound, ErrNotFound, "no agent named %s in %s (agent.list shows them)", name, s.dir)
	}
	if err != nil {
		return Definition{}, fmt.Errorf("read agent %s: %w", name, err)
	}
	d, err := ParseDefinition(data)
	if err != nil {
		return d, errs.New(errcode.InvalidParams, "agent %s (%s): %v", name, s.path(name), err)
	}
	d.Name, d.Path = name, s.path(name)
	return d, nil
}

// List reads every definition, sorted by name; files that do not parse or
// are not named [a-z0-9-]+.md are skipped.
func (s *Definitions) List() ([]Definition, error) {
	if s.shared != nil {
		return s.listShared()
	}
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.dir, err)
	}
	var out []Definition
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".md")
		if !ok || e.IsDir() || ValidName(name) != nil {
			continue
		}
		d, err := s.Get(name)
		if err != nil {
			continue
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// NameFrom makes an agent name from a description: the first words, lower
// case, of a-z and 0-9, joined by "-" (at most 4 words and 40 characters);
// "agent" when nothing is left.
func NameFrom(description string) string {
	var words []string
	for _, w := range strings.FieldsFunc(strings.ToLower(description), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}) {
		if len(words) == 4 || len(strings.Join(append(words, w), "-")) > 40 {
			break
		}
		words = append(words, w)
	}
	if len(words) == 0 {
		return "agent"
	}
	return strings.Join(words, "-")
}

// FreeName is NameFrom(description), with "-2", "-3", ... appended until no
// definition has that name.
func (s *Definitions) FreeName(description string) (string, error) {
	base := NameFrom(description)
	for i := 1; i < 1000; i++ {
		name := base
		if i > 1 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		taken, err := s.nameTaken(name)
		if err != nil {
			return "", fmt.Errorf("find a free agent name: %w", err)
		}
		if !taken {
			return name, nil
		}
	}
	return "", errs.New(errcode.InvalidParams, "no free agent name for %q: give a name", base)
}
