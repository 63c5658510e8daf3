package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
)

// Registry holds the tools of a daemon (or of one session) with their
// compiled argument schemas. It is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	tools map[string]*entry
	guard *Guard // given to every call that has none
	lent  bool   // holds tools a client lent (Lent)
}

// Lent reports whether r holds tools a client lent (tool.register).
func (r *Registry) Lent() bool { return r.lent }

// SetGuard makes every call run through r protected by g (the daemon's
// home), unless the call brings its own.
func (r *Registry) SetGuard(g *Guard) {
	r.mu.Lock()
	r.guard = g
	r.mu.Unlock()
}

type entry struct {
	tool   Tool
	schema *jsonschema.Schema
}

// Info describes a tool as tool.list reports it.
type Info struct {
	Name          string          `json:"name"`
	Description   string          `json:"description"`
	PermissionTag approval.Tag    `json:"permissionTag"`
	State         string          `json:"state"` // "active" | "inactive"
	Reason        string          `json:"reason"`
	Source        string          `json:"source"` // "builtin" | "mcp" | "client" (lent)
	Server        string          `json:"server"`
	InputSchema   json.RawMessage `json:"inputSchema"`
}

// NewRegistry returns a registry holding tools (see Register).
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{tools: map[string]*entry{}}
	for _, t := range tools {
		if err := r.Register(t); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Register adds t, compiling its input schema once. It fails for an empty or
// taken name (ErrDuplicateTool), an invalid permission tag, or a schema that
// does not compile.
func (r *Registry) Register(t Tool) error {
	name := t.Name()
	if name == "" {
		return errors.New("tool: register: empty tool name")
	}
	if !t.Tag().Valid() {
		return fmt.Errorf("tool: register %s: invalid permission tag %q", name, t.Tag())
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.InputSchema()))
	if err != nil {
		return fmt.Errorf("tool: register %s: input schema is not JSON: %w", name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	url := "trellis:///tools/" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return fmt.Errorf("tool: register %s: %w", name, err)
	}
	schema, err := c.Compile(url)
	if err != nil {
		return fmt.Errorf("tool: register %s: input schema does not compile: %w", name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.tools[name]; dup {
		return fmt.Errorf("tool: register %s: %w", name, ErrDuplicateTool)
	}
	r.tools[name] = &entry{tool: t, schema: schema}
	return nil
}

// Unregister removes the tool called name and reports whether it was
// there; an MCP server whose tool list changed drops its old tools so.
func (r *Registry) Unregister(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.tools[name]
	delete(r.tools, name)
	return ok
}

// Lookup returns the tool called name.
func (r *Registry) Lookup(name string) (Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.tools[name]
	if !ok {
		return nil, false
	}
	return e.tool, true
}

// Names returns the registered tool names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.tools))
}

// List describes every tool, sorted by name.
func (r *Registry) List() []Info {
	names := r.Names()
	infos := make([]Info, 0, len(names))
	for _, n := range names {
		t, ok := r.Lookup(n)
		if !ok {
			continue
		}
		st := stateOf(t)
		info := Info{
			Name:          n,
			Description:   t.Description(),
			PermissionTag: t.Tag(),
			State:         "active",
			Source:        "builtin",
			InputSchema:   t.InputSchema(),
		}
		if !st.Active {
			info.State, info.Reason = "inactive", st.Reason
		}
		if o, ok := t.(Originer); ok {
			info.Source, info.Server = o.Origin()
		}
		infos = append(infos, info)
	}
	return infos
}

func stateOf(t Tool) State {
	if s, ok := t.(Stater); ok {
		return s.State()
	}
	return State{Active: true}
}

// Validate checks a call before it is approved or run: the tool exists
// (else invalid_params wrapping ErrUnknownTool), it is active (else the
// tool's State.Code, tool_inactive by default, wrapping ErrInactive), and
// args satisfy its schema (else invalid_params wrapping ErrInvalidArgs,
// naming every problem). The returned error is an *errs.Error.
func (r *Registry) Validate(name string, args json.RawMessage) error {
	r.mu.RLock()
	e, ok := r.tools[name]
	r.mu.RUnlock()
	if !ok {
		return errs.Wrap(errcode.InvalidParams, ErrUnknownTool,
			"unknown tool %q; the tools are: %s", name, strings.Join(r.Names(), ", "))
	}
	if st := stateOf(e.tool); !st.Active {
		code := st.Code
		if code == "" {
			code = errcode.ToolInactive
		}
		return errs.Wrap(code, ErrInactive, "tool %s is inactive: %s", name, st.Reason)
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("null")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return errs.Wrap(errcode.InvalidParams, ErrInvalidArgs, "arguments for %s are not valid JSON: %v", name, err)
	}
	if v == nil {
		v = map[string]any{}
	}
	if _, isObj := v.(map[string]any); !isObj {
		return errs.Wrap(errcode.InvalidParams, ErrInvalidArgs, "arguments for %s must be a JSON object", name)
	}
	if err := e.schema.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return errs.Wrap(errcode.InvalidParams, ErrInvalidArgs,
				"invalid arguments for %s: %s", name, describe(ve))
		}
		return errs.Wrap(errcode.InvalidParams, ErrInvalidArgs, "invalid arguments for %s: %v", name, err)
	}
	return nil
}

// printer renders schema validation messages (the validator's own wording).
var printer = message.NewPrinter(language.English)

// describe flattens a validation error tree into "where: what" clauses.
func describe(ve *jsonschema.ValidationError) string {
	var parts []string
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			where := "arguments"
			if len(e.InstanceLocation) > 0 {
				where = strings.Join(e.InstanceLocation, ".")
			}
			parts = append(parts, where+": "+e.ErrorKind.LocalizedString(printer))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// Run validates the call (see Validate) and runs it. The error is non-nil
// only when the call could not be run at all: a failed validation (an
// *errs.Error to report as an error event plus a failed tool.result), a bad
// Call (internal), or the tool's own infrastructure failure. Everything
// else, including interruption through ctx, is a Result.
func (r *Registry) Run(ctx context.Context, name string, call Call) (Result, error) {
	if err := r.Validate(name, call.Args); err != nil {
		return Result{}, err
	}
	if !filepath.IsAbs(call.Workdir) {
		return Result{}, errs.New(errcode.Internal, "tool %s: the session's workdir %q is not absolute", name, call.Workdir)
	}
	if len(bytes.TrimSpace(call.Args)) == 0 || string(bytes.TrimSpace(call.Args)) == "null" {
		call.Args = json.RawMessage("{}")
	}
	if call.Progress == nil {
		call.Progress = func(string, string, bool) {}
	}
	if call.Guard == nil {
		r.mu.RLock()
		call.Guard = r.guard
		r.mu.RUnlock()
	}
	t, _ := r.Lookup(name)
	return t.Run(ctx, call)
}
