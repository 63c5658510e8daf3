package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
)

// Client-lent tools (tool.register): a WebSocket client lends tools of its
// own to a session, or to every session its connection originates. The
// model sees them as it sees the built-ins; a call of one goes to the
// lending connection through its origin's Lender, and fails (ok:false)
// when the lender is gone, is gone before it answers, or does not answer
// in time. A lender's tools vanish with it.

// Limits of tool.register.
const (
	MaxLentTools       = 64
	DefaultLentTimeout = 120 * time.Second
	MaxLentTimeout     = time.Hour
)

// HostBrowser is the name of the lent tool that is a session's host
// browser: it does not take the built-in browser's place, the built-in
// sends its calls to it while the session's browser provider is host.
const HostBrowser = "browser"

// lentName is the form of a lent tool's name.
var lentName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// LentTags are the permission tags a lent tool may carry.
var LentTags = []approval.Tag{approval.TagRead, approval.TagWrite, approval.TagExec, approval.TagNetwork}

// LentDef is one tool a client lends.
type LentDef struct {
	Name        string
	Description string
	// Schema is the JSON Schema of the arguments; empty: any object.
	Schema json.RawMessage
	Tag    approval.Tag
	// Replace: the tool takes the place of the built-in of its name.
	Replace bool
	// Timeout bounds a call's wait for the answer (0: DefaultLentTimeout).
	Timeout time.Duration
}

// LentCall is one call of a lent tool, as it goes to its lender.
type LentCall struct {
	SessionID, TurnID, CallID, Name string
	Args                            json.RawMessage
}

// LentReply is a lender's answer to a call.
type LentReply struct {
	Output  string
	IsError bool
}

// Lender sends a call to the client that lent the tool and waits for its
// answer. It returns an error when there is none (the client went away,
// answered with an error, or ctx ended), whose message says why.
type Lender func(ctx context.Context, call LentCall) (LentReply, error)

// lentKey names one set of lent tools: an origin's for one session, or
// for every session it originates (session "").
type lentKey struct{ origin, session string }

// Lent holds the tools clients lent and their lenders. It is safe for
// concurrent use.
type Lent struct {
	mu      sync.Mutex
	lenders map[string]*lenderRef // by origin
	regs    map[lentKey]*Registry
	defs    map[lentKey]map[string]LentDef
}

type lenderRef struct{ call Lender }

// NewLent returns an empty set of lent tools.
func NewLent() *Lent {
	return &Lent{lenders: map[string]*lenderRef{}, regs: map[lentKey]*Registry{}, defs: map[lentKey]map[string]LentDef{}}
}

// Attach makes call the lender of origin's tools (replacing an earlier
// one) until detach is called: then the tools origin lent are
// unregistered, unless another Attach took the origin over meanwhile.
func (l *Lent) Attach(origin string, call Lender) (detach func()) {
	ref := &lenderRef{call: call}
	l.mu.Lock()
	l.lenders[origin] = ref
	l.mu.Unlock()
	return sync.OnceFunc(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.lenders[origin] != ref {
			return
		}
		delete(l.lenders, origin)
		for k := range l.regs {
			if k.origin == origin {
				delete(l.regs, k)
				delete(l.defs, k)
			}
		}
	})
}

// Attached reports whether origin has a lender.
func (l *Lent) Attached(origin string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lenders[origin] != nil
}

// lender returns origin's lender, nil when it has none.
func (l *Lent) lender(origin string) Lender {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.lenders[origin]; r != nil {
		return r.call
	}
	return nil
}

// Registries returns the lent tools of a session whose current origin is
// origin: those lent to it by any connection, then those its origin lent
// to all its sessions.
func (l *Lent) Registries(sessionID, origin string) []*Registry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*Registry
	keys := make([]lentKey, 0, len(l.regs))
	for k := range l.regs {
		if sessionID != "" && k.session == sessionID {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].origin < keys[j].origin })
	for _, k := range keys {
		out = append(out, l.regs[k])
	}
	if r := l.regs[lentKey{origin: origin}]; r != nil && origin != "" {
		out = append(out, r)
	}
	return out
}

// Register lends defs of origin to session sessionID ("": every session
// origin originates). others are the session's tools that are not lent
// (the built-ins, MCP tools): a name among them is refused unless the def
// replaces a built-in. A name origin already lent to the same target is
// redefined. Bad input is invalid_params naming the field; an origin with
// no lender is unsupported (only a WebSocket connection lends).
func (l *Lent) Register(origin, sessionID string, defs []LentDef, others []Info) ([]string, error) {
	if len(defs) == 0 || len(defs) > MaxLentTools {
		return nil, errs.New(errcode.InvalidParams, "tools must hold between 1 and %d tools (got %d)", MaxLentTools, len(defs)).WithData("field", "tools")
	}
	other := map[string]Info{}
	for _, in := range others {
		if in.Source != "client" {
			other[in.Name] = in
		}
	}
	seen := map[string]bool{}
	tools := make([]*lentTool, 0, len(defs))
	for i, d := range defs {
		field := fmt.Sprintf("tools[%d]", i)
		if !lentName.MatchString(d.Name) {
			return nil, errs.New(errcode.InvalidParams, "%s.name %q must be 1-64 letters, digits, _ or -", field, d.Name).WithData("field", field+".name")
		}
		if seen[d.Name] {
			return nil, errs.New(errcode.InvalidParams, "%s.name: %s is given twice", field, d.Name).WithData("field", field+".name")
		}
		seen[d.Name] = true
		if !slices.Contains(LentTags, d.Tag) {
			return nil, errs.New(errcode.InvalidParams, "%s.permission %q must be one of read, write, exec, network", field, d.Tag).WithData("field", field+".permission")
		}
		in, taken := other[d.Name]
		switch {
		case d.Name == HostBrowser:
			// The host browser: the built-in calls it (provider host).
		case d.Replace && (!taken || in.Source != "builtin"):
			return nil, errs.New(errcode.InvalidParams, "%s.replace: %s is not a built-in tool, so there is nothing to replace", field, d.Name).WithData("field", field+".replace")
		case taken && !d.Replace && in.Source == "builtin":
			return nil, errs.New(errcode.InvalidParams, "%s.name: %s is a built-in tool; choose another name, or set replace to take its place", field, d.Name).WithData("field", field+".name")
		case taken && !d.Replace:
			return nil, errs.New(errcode.InvalidParams, "%s.name: %s is a tool of MCP server %s; choose another name", field, d.Name, in.Server).WithData("field", field+".name")
		}
		if d.Timeout < 0 || d.Timeout > MaxLentTimeout {
			return nil, errs.New(errcode.InvalidParams, "%s.timeoutSec must be between 1 and %d", field, int(MaxLentTimeout/time.Second)).WithData("field", field+".timeoutSec")
		}
		if d.Timeout == 0 {
			d.Timeout = DefaultLentTimeout
		}
		schema, err := lentSchema(d.Schema)
		if err != nil {
			return nil, errs.New(errcode.InvalidParams, "%s.inputSchema: %v", field, err).WithData("field", field+".inputSchema")
		}
		d.Schema = schema
		tools = append(tools, &lentTool{l: l, origin: origin, def: d})
	}
	key := lentKey{origin: origin, session: sessionID}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lenders[origin] == nil {
		return nil, errs.NewUnsupported("transport", "rest", "tool.register lends tools only from a WebSocket connection, which answers their calls (tool.call): connect over /ws and call it there")
	}
	// Another connection's tools of the same session keep their names.
	for k, ds := range l.defs {
		if k.origin == origin || sessionID == "" || k.session != sessionID {
			continue
		}
		for _, t := range tools {
			if _, ok := ds[t.def.Name]; ok {
				return nil, errs.New(errcode.InvalidParams, "tools: %s is already lent to session %s by another connection", t.def.Name, sessionID).WithData("field", "tools")
			}
		}
	}
	// A new registry holds the origin's earlier tools of the target plus
	// these: the turns running keep the one they took.
	defsNow := map[string]LentDef{}
	for n, d := range l.defs[key] {
		defsNow[n] = d
	}
	for _, t := range tools {
		defsNow[t.def.Name] = t.def
	}
	reg, err := l.registryOf(origin, defsNow)
	if err != nil {
		return nil, errs.New(errcode.InvalidParams, "tools: %v", err).WithData("field", "tools")
	}
	l.regs[key], l.defs[key] = reg, defsNow
	names := slices.Sorted(maps.Keys(defsNow))
	return names, nil
}

// HostBrowserOf returns the browser lent to a session whose current
// origin is origin (by any connection to the session, else by origin to
// all its sessions), nil when none is.
func (l *Lent) HostBrowserOf(sessionID, origin string) Tool {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := make([]lentKey, 0, len(l.defs))
	for k := range l.defs {
		if sessionID != "" && k.session == sessionID {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].origin < keys[j].origin })
	if origin != "" {
		keys = append(keys, lentKey{origin: origin})
	}
	for _, k := range keys {
		if d, ok := l.defs[k][HostBrowser]; ok {
			return &lentTool{l: l, origin: k.origin, def: d}
		}
	}
	return nil
}

// Unregister takes back the tools origin lent to sessionID ("": to all
// its sessions) named in names (none: all of them) and returns the names
// removed.
func (l *Lent) Unregister(origin, sessionID string, names []string) []string {
	key := lentKey{origin: origin, session: sessionID}
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.defs[key]
	left := map[string]LentDef{}
	var removed []string
	for n, d := range cur {
		if len(names) == 0 || slices.Contains(names, n) {
			removed = append(removed, n)
			continue
		}
		left[n] = d
	}
	sort.Strings(removed)
	if len(left) == 0 {
		delete(l.regs, key)
		delete(l.defs, key)
		return removed
	}
	if reg, err := l.registryOf(origin, left); err == nil {
		l.regs[key], l.defs[key] = reg, left
	}
	return removed
}

// registryOf builds the registry of defs lent by origin.
func (l *Lent) registryOf(origin string, defs map[string]LentDef) (*Registry, error) {
	reg := &Registry{tools: map[string]*entry{}, lent: true}
	for _, d := range defs {
		if d.Name == HostBrowser {
			continue // not a tool of its own: HostBrowserOf
		}
		if err := reg.Register(&lentTool{l: l, origin: origin, def: d}); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// lentSchema checks a lent tool's input schema: a JSON object whose type,
// when given, is object; it must compile (Register compiles it). Empty:
// any object.
func lentSchema(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "{}" {
		return json.RawMessage(`{"type":"object"}`), nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, errors.New("must be a JSON Schema object")
	}
	if t, ok := m["type"]; ok && t != "object" {
		return nil, fmt.Errorf("type must be \"object\" (the arguments are an object), got %v", t)
	}
	probe := &Registry{tools: map[string]*entry{}}
	if err := probe.Register(&lentTool{def: LentDef{Name: "probe", Tag: approval.TagRead, Schema: raw}}); err != nil {
		var msg = err.Error()
		if i := bytes.Index([]byte(msg), []byte("input schema")); i >= 0 {
			msg = msg[i:]
		}
		return nil, errors.New(msg)
	}
	return raw, nil
}

// lentTool is one lent tool; its calls go to its origin's lender.
type lentTool struct {
	l      *Lent
	origin string
	def    LentDef
}

func (t *lentTool) Name() string                 { return t.def.Name }
func (t *lentTool) Description() string          { return t.def.Description }
func (t *lentTool) Tag() approval.Tag            { return t.def.Tag }
func (t *lentTool) InputSchema() json.RawMessage { return t.def.Schema }

// Origin implements Originer: source "client", the lending origin.
func (t *lentTool) Origin() (string, string) { return "client", t.origin }

// Run sends the call to the lender and waits for its answer, at most the
// tool's timeout.
func (t *lentTool) Run(ctx context.Context, call Call) (Result, error) {
	send := t.l.lender(t.origin)
	if send == nil {
		return Failed("%s is a tool the client lent, and that client is gone (its connection closed); go on without it", t.def.Name), nil
	}
	ctx, cancel := context.WithTimeout(ctx, t.def.Timeout)
	defer cancel()
	reply, err := send(ctx, LentCall{SessionID: call.SessionID, TurnID: call.TurnID, CallID: call.ID, Name: t.def.Name, Args: call.Args})
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return Failed("%s: the client that lent it did not answer within %s", t.def.Name, t.def.Timeout), nil
	case err != nil:
		return Failed("%s: %v", t.def.Name, err), nil
	}
	out, full := CapOutput(reply.Output, t.def.Name, call.ID, call.OutputDir)
	if reply.IsError {
		return Result{OK: false, Output: out, Error: out, FullOutput: full}, nil
	}
	return Result{OK: true, Output: out, FullOutput: full}, nil
}
