package toolbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/agent"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/tool"
)

// Asker puts a question to a person (the session's origin approver or the
// unattended queue) and waits for the answer. It returns nil when the call is
// allowed, or an error with code approval_denied or approval_timeout.
type Asker interface {
	Ask(ctx context.Context, q approval.Question) error
}

// Allowlist tells whether a call matches an allowlist entry of its session,
// project (workdir) or everywhere.
type Allowlist interface {
	Allowed(ctx context.Context, sessionID, workdir, tool string, args json.RawMessage) bool
}

// Extra supplies the tools that do not come with the daemon (MCP
// servers) for a session, starting their servers when first needed.
type Extra interface {
	Registries(ctx context.Context, s session.Info) []*tool.Registry
}

// Toolbox implements session.Toolbox.
type Toolbox struct {
	registry  *tool.Registry
	outputDir string
	asker     Asker      // nil: questions are denied
	allowlist Allowlist  // nil: nothing is allowlisted
	extra     Extra      // nil: built-in tools only
	backend   Backend    // nil: tools run locally
	lent      *tool.Lent // nil: no client lends tools
}

// Backend supplies the workdir tools of a session whose backend is remote
// (ssh); nil when it is local.
type Backend interface {
	Registry(ctx context.Context, s session.Info) *tool.Registry
}

// Option configures a Toolbox at construction.
type Option func(*Toolbox)

// WithBackend makes sessions on a remote backend use its tools.
func WithBackend(be Backend) Option { return func(b *Toolbox) { b.backend = be } }

// WithLent adds the tools clients lent (tool.register) to the sessions
// they were lent to, ahead of the others: a lent tool that replaces a
// built-in is the one a session's turns see.
func WithLent(l *tool.Lent) Option { return func(b *Toolbox) { b.lent = l } }

// WithExtra adds the tools e supplies to every session's.
func WithExtra(e Extra) Option { return func(b *Toolbox) { b.extra = e } }

// registries are the registries of a session's tools, built-ins first.
func (b *Toolbox) registries(ctx context.Context, s session.Info) []*tool.Registry {
	regs := []*tool.Registry{b.registry}
	if b.backend != nil {
		if r := b.backend.Registry(ctx, s); r != nil {
			// First: its shell and file tools take the local ones' place.
			regs = []*tool.Registry{r, b.registry}
		}
	}
	if b.extra != nil {
		regs = append(regs, b.extra.Registries(ctx, s)...)
	}
	if b.lent != nil {
		if lent := b.lent.Registries(s.SessionID, s.Origin); len(lent) > 0 {
			regs = append(lent, regs...)
		}
	}
	return regs
}

// lookup finds a tool in regs and the registry holding it; an unknown
// name gets the first registry that is not lent (whose Validate lists the
// built-ins).
func lookup(regs []*tool.Registry, name string) (*tool.Registry, tool.Tool, bool) {
	for _, r := range regs {
		if t, ok := r.Lookup(name); ok {
			return r, t, true
		}
	}
	for _, r := range regs {
		if !r.Lent() {
			return r, nil, false
		}
	}
	return regs[0], nil, false
}

// List describes the tools of a session (tool.list), sorted by name; with
// a zero Info, the daemon's tools.
func (b *Toolbox) List(ctx context.Context, s session.Info) []tool.Info {
	return listOf(b.registries(ctx, s))
}

// Unlent is List without the tools clients lent.
func (b *Toolbox) Unlent(ctx context.Context, s session.Info) []tool.Info {
	var regs []*tool.Registry
	for _, r := range b.registries(ctx, s) {
		if !r.Lent() {
			regs = append(regs, r)
		}
	}
	return listOf(regs)
}

// listOf describes the tools of regs, the first of a name only, sorted.
func listOf(regs []*tool.Registry) []tool.Info {
	var out []tool.Info
	seen := map[string]bool{}
	for _, r := range regs {
		for _, info := range r.List() {
			if !seen[info.Name] {
				seen[info.Name] = true
				out = append(out, info)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// New returns a toolbox over registry; full tool outputs are kept under
// outputDir/<sessionId>.
func New(registry *tool.Registry, outputDir string, asker Asker, allowlist Allowlist, opts ...Option) *Toolbox {
	b := &Toolbox{registry: registry, outputDir: outputDir, asker: asker, allowlist: allowlist}
	for _, o := range opts {
		o(b)
	}
	return b
}

// Tools returns the tools of one turn.
func (b *Toolbox) Tools(ctx context.Context, s session.Info) agent.Tools {
	return tools{b: b, s: s, regs: b.registries(ctx, s)}
}

// Gate returns the approval gate of one turn.
func (b *Toolbox) Gate(ctx context.Context, s session.Info, turnID string) agent.Gate {
	return gate{b: b, s: s, turnID: turnID, regs: b.registries(ctx, s)}
}

type tools struct {
	b    *Toolbox
	s    session.Info
	regs []*tool.Registry
}

// Specs lists the active tools for the model.
func (t tools) Specs(context.Context) []llm.ToolSpec {
	var specs []llm.ToolSpec
	seen := map[string]bool{}
	for _, r := range t.regs {
		for _, info := range r.List() {
			if info.State != "active" || seen[info.Name] {
				continue
			}
			seen[info.Name] = true
			specs = append(specs, llm.ToolSpec{Name: info.Name, Description: info.Description, InputSchema: info.InputSchema})
		}
	}
	return specs
}

// ChangesWorkdir reports whether the tool may change the session's workdir:
// its permission tag is write or exec (agent.WorkdirChanger).
func (t tools) ChangesWorkdir(name string) bool {
	_, tl, ok := lookup(t.regs, name)
	return ok && (tl.Tag() == approval.TagWrite || tl.Tag() == approval.TagExec)
}

// Run runs one call; validation failures and refusals are failed results.
func (t tools) Run(ctx context.Context, call agent.ToolCall, progress func(agent.Progress)) agent.ToolResult {
	reg, _, _ := lookup(t.regs, call.Name)
	res, err := reg.Run(ctx, call.Name, tool.Call{
		ID:        call.CallID,
		SessionID: t.s.SessionID,
		TurnID:    call.TurnID,
		Origin:    t.s.Origin,
		Mode:      t.s.Mode,
		Args:      call.Args,
		Workdir:   t.s.Workdir,
		OutputDir: filepath.Join(t.b.outputDir, t.s.SessionID),
		Progress: func(stream, chunk string, truncated bool) {
			progress(agent.Progress{Stream: stream, Chunk: chunk, Truncated: truncated})
		},
	})
	if err != nil {
		msg := err.Error()
		if errs.CodeOf(err) == errcode.Internal {
			msg = "the tool could not run: " + msg
		}
		res := agent.ToolResult{OK: false, Output: msg, Error: msg}
		if errors.Is(err, tool.ErrInactive) {
			res.Code = errs.CodeOf(err)
		}
		return res
	}
	out := agent.ToolResult{OK: res.OK, Output: res.Output, Error: res.Error}
	for _, img := range res.Images {
		out.Images = append(out.Images, llm.Image{MediaType: img.MediaType, Data: img.Data})
	}
	if len(res.Diffs) > 0 {
		out.Diff = &events.DiffEvent{Path: res.Diffs[0].Path, Patch: res.Diffs[0].Patch}
	}
	return out
}

type gate struct {
	b      *Toolbox
	s      session.Info
	turnID string
	regs   []*tool.Registry
}

// Authorize applies the mode policy, the allowlist, then asks a person.
func (g gate) Authorize(ctx context.Context, call agent.ToolCall) error {
	reg, t, ok := lookup(g.regs, call.Name)
	if !ok || reg.Validate(call.Name, call.Args) != nil {
		// Unknown tools, invalid arguments and inactive tools fail in Run
		// with a clear message and run nothing: no one needs to be asked.
		return nil
	}
	tag := t.Tag()
	if tag == approval.TagExec && g.s.DenyExec {
		return errs.New(errcode.ModeDenied, "this session was created with denyExec: it runs no exec tools such as %s", call.Name)
	}
	mode := approval.Mode(g.s.Mode)
	switch approval.Decide(mode, tag, false) {
	case approval.Allow:
		return nil
	case approval.Deny:
		return errs.New(errcode.ModeDenied, "mode %s does not allow %s tools such as %s", mode, tag, call.Name)
	}
	if tag != approval.TagConfig && g.b.allowlist != nil && g.b.allowlist.Allowed(ctx, g.s.SessionID, g.s.Workdir, call.Name, call.Args) {
		return nil
	}
	if g.b.asker == nil {
		return errs.New(errcode.ApprovalDenied, "%s needs approval and no approver is configured", call.Name)
	}
	err := g.b.asker.Ask(ctx, approval.Question{
		SessionID: g.s.SessionID, Workdir: g.s.Workdir, Mode: g.s.Mode, Kind: g.s.Kind, JobID: g.s.JobID,
		Origin: g.s.Origin, TurnID: g.turnID, CallID: call.CallID, Tool: call.Name, Args: call.Args, Tag: tag,
	})
	if err != nil && ctx.Err() != nil {
		return errs.New(errcode.ApprovalDenied, "the turn was interrupted before %s was approved", call.Name)
	}
	if err != nil && errs.CodeOf(err) == errcode.Internal {
		return fmt.Errorf("ask for approval: %w", err)
	}
	return err
}
