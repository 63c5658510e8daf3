package rpc

import (
	"context"

	"google.golang.org/protobuf/proto"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/tool/mcp"
)

// MCPAdmin changes the daemon's MCP servers (the daemon's mcpServers):
// Saved, Put and Delete act on <home>/mcp.json, Configured reads either
// configuration file.
type MCPAdmin interface {
	Path() string
	Saved(name string) (mcp.ServerConfig, error)
	Configured(name string) (mcp.ServerConfig, error)
	Put(ctx context.Context, name string, cfg mcp.ServerConfig, replace bool) error
	Delete(ctx context.Context, name string) error
	Restart(ctx context.Context, name string) ([]string, error)
	Settle(ctx context.Context, name string, cfg mcp.ServerConfig) (mcp.Status, []mcp.ToolInfo)
	Probe(ctx context.Context, name string, cfg mcp.ServerConfig) mcp.ProbeResult
}

// mcpFields are the server fields the params of mcp.add, mcp.test and
// mcp.update's patch share.
type mcpFields interface {
	GetArgs() []string
	GetCommand() string
	GetCwd() string
	GetDisabled() bool
	GetEnv() map[string]string
	GetHeaders() map[string]string
	GetPermission() string
	GetTimeoutSec() float64
	GetToolTimeoutSec() float64
	GetToolsExclude() []string
	GetToolsInclude() []string
	GetType() string
	GetUrl() string
}

// unsupportedMCPFields refuses snowpea's fields Trellis has no counterpart for.
func unsupportedMCPFields(f mcpFields) error {
	switch {
	case f.GetPermission() != "":
		return errs.NewUnsupported("permission", f.GetPermission(), "permission is not supported: Trellis tags an MCP server's tools by their annotations")
	case len(f.GetToolsInclude()) > 0:
		return errs.NewUnsupported("toolsInclude", "", "toolsInclude is not supported: every tool of an MCP server is registered")
	case len(f.GetToolsExclude()) > 0:
		return errs.NewUnsupported("toolsExclude", "", "toolsExclude is not supported: every tool of an MCP server is registered")
	}
	return nil
}

// patchMCP sets on cfg the fields f gives (has reports which scalars are
// present; an empty list or map is absent).
func patchMCP(cfg *mcp.ServerConfig, f mcpFields, has func(field string) bool) {
	if has("type") {
		cfg.Type = f.GetType()
	}
	if has("command") {
		cfg.Command = f.GetCommand()
	}
	if len(f.GetArgs()) > 0 {
		cfg.Args = f.GetArgs()
	}
	if len(f.GetEnv()) > 0 {
		cfg.Env = f.GetEnv()
	}
	if has("cwd") {
		cfg.Cwd = f.GetCwd()
	}
	if has("url") {
		cfg.URL = f.GetUrl()
	}
	if len(f.GetHeaders()) > 0 {
		cfg.Headers = f.GetHeaders()
	}
	if has("disabled") {
		cfg.Disabled = f.GetDisabled()
	}
	if has("timeoutSec") {
		cfg.StartTimeoutSec = f.GetTimeoutSec()
	}
	if has("toolTimeoutSec") {
		cfg.TimeoutSec = f.GetToolTimeoutSec()
	}
}

// snowpeaState is a server state as snowpea 1.7 names it.
func snowpeaState(state string) string {
	switch state {
	case mcp.StateIdle:
		return "stopped"
	case mcp.StateFailed:
		return "error"
	}
	return state
}

func mcpToolsToProto(ts []mcp.ToolInfo) []*trellisv1.McpToolInfo {
	out := make([]*trellisv1.McpToolInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, &trellisv1.McpToolInfo{Name: t.Name, Description: t.Description})
	}
	return out
}

// checkMCPTarget checks the scope, session and workdir of an MCP change:
// only the daemon's configuration ("global") exists; a session or workdir
// named must exist.
func (s *ToolServer) checkMCPTarget(ctx context.Context, scope, sessionID string, workdir *string) error {
	if scope != "" && scope != "global" {
		return errs.NewUnsupported("scope", scope, "scope %q is not supported: Trellis's MCP servers are the daemon's (\"global\", <home>/mcp.json)", scope)
	}
	if sessionID != "" {
		if _, err := s.sessions.Get(ctx, sessionID); err != nil {
			return err
		}
	}
	return checkWorkdir(workdir)
}

// AddMcpServer writes a server into <home>/mcp.json and starts it.
func (s *ToolServer) AddMcpServer(ctx context.Context, req *trellisv1.AddMcpServerRequest) (*trellisv1.AddMcpServerResponse, error) {
	if err := s.checkMCPTarget(ctx, req.GetScope(), req.GetSessionId(), req.Workdir); err != nil {
		return nil, err
	}
	if req.GetPreset() != "" {
		return nil, errs.NewUnsupported("preset", req.GetPreset(), "preset is not supported: Trellis ships no catalog of MCP servers; give command or url")
	}
	if err := unsupportedMCPFields(req); err != nil {
		return nil, err
	}
	var cfg mcp.ServerConfig
	patchMCP(&cfg, req, func(field string) bool { return fieldSet(req, field) })
	out := &trellisv1.AddMcpServerResponse{Path: s.admin.Path(), Tools: []*trellisv1.McpToolInfo{}, Warnings: []string{}}
	if req.GetTest() {
		if err := cfg.Validate(); err != nil {
			return nil, errs.New(errcode.InvalidParams, "MCP server %s: %v", req.GetName(), err)
		}
		p := s.admin.Probe(ctx, req.GetName(), cfg)
		if p.Status.State != mcp.StateReady {
			out.State = "error"
			out.Error = ptr(probeError(p.Status))
			return out, nil
		}
	}
	if err := s.admin.Put(ctx, req.GetName(), cfg, req.GetForce()); err != nil {
		return nil, err
	}
	out.Ok = true
	st, tools := s.admin.Settle(ctx, req.GetName(), cfg)
	out.State, out.Tools = snowpeaState(st.State), mcpToolsToProto(tools)
	if st.State != mcp.StateReady && st.Reason != "" {
		out.Error = ptr(st.Reason)
	}
	return out, nil
}

// RemoveMcpServer deletes a server of <home>/mcp.json and stops it.
func (s *ToolServer) RemoveMcpServer(ctx context.Context, req *trellisv1.RemoveMcpServerRequest) (*trellisv1.RemoveMcpServerResponse, error) {
	if err := s.checkMCPTarget(ctx, req.GetScope(), req.GetSessionId(), req.Workdir); err != nil {
		return nil, err
	}
	if err := s.admin.Delete(ctx, req.GetName()); err != nil {
		return nil, err
	}
	return &trellisv1.RemoveMcpServerResponse{Ok: true}, nil
}

// UpdateMcpServer merges a patch into a server of <home>/mcp.json and
// restarts it.
func (s *ToolServer) UpdateMcpServer(ctx context.Context, req *trellisv1.UpdateMcpServerRequest) (*trellisv1.UpdateMcpServerResponse, error) {
	if err := s.checkMCPTarget(ctx, req.GetScope(), req.GetSessionId(), req.Workdir); err != nil {
		return nil, err
	}
	patch := req.GetPatch()
	if patch == nil {
		patch = &trellisv1.McpServerPatch{}
	}
	if err := unsupportedMCPFields(patch); err != nil {
		return nil, err
	}
	cfg, err := s.admin.Saved(req.GetName())
	if err != nil {
		return nil, err
	}
	if patch.Url != nil && patch.Command == nil {
		cfg.Command, cfg.Args = "", nil // becomes an http server
	}
	if patch.Command != nil && patch.Url == nil {
		cfg.URL, cfg.Headers = "", nil // becomes a stdio server
	}
	patchMCP(&cfg, patch, func(field string) bool { return fieldSet(patch, field) })
	if err := s.admin.Put(ctx, req.GetName(), cfg, true); err != nil {
		return nil, err
	}
	return &trellisv1.UpdateMcpServerResponse{Ok: true}, nil
}

// TestMcpServer probes a configured server or a draft.
func (s *ToolServer) TestMcpServer(ctx context.Context, req *trellisv1.TestMcpServerRequest) (*trellisv1.TestMcpServerResponse, error) {
	if err := s.checkMCPTarget(ctx, "", req.GetSessionId(), req.Workdir); err != nil {
		return nil, err
	}
	if err := unsupportedMCPFields(req); err != nil {
		return nil, err
	}
	draft := req.Command != nil || req.Url != nil
	name := req.GetName()
	var cfg mcp.ServerConfig
	switch {
	case draft:
		if name == "" {
			name = "draft"
		}
		patchMCP(&cfg, req, func(field string) bool { return fieldSet(req, field) })
		if err := cfg.Validate(); err != nil {
			return nil, errs.New(errcode.InvalidParams, "MCP server %s: %v", name, err)
		}
	case name == "":
		return nil, errs.New(errcode.InvalidParams, "give name (a configured server) or command or url (a draft)")
	default:
		var err error
		if cfg, err = s.admin.Configured(name); err != nil {
			return nil, err
		}
	}
	p := s.admin.Probe(ctx, name, cfg)
	out := &trellisv1.TestMcpServerResponse{Ok: p.Status.State == mcp.StateReady, State: snowpeaState(p.Status.State),
		Tools: mcpToolsToProto(p.Tools), ElapsedMs: p.Elapsed.Milliseconds()}
	if !out.Ok {
		out.State = "error"
		out.Error = ptr(probeError(p.Status))
	}
	return out, nil
}

// ReloadMcpServers reads the configuration again and restarts servers.
func (s *ToolServer) ReloadMcpServers(ctx context.Context, req *trellisv1.ReloadMcpServersRequest) (*trellisv1.ReloadMcpServersResponse, error) {
	if err := s.checkMCPTarget(ctx, "", req.GetSessionId(), req.Workdir); err != nil {
		return nil, err
	}
	names, err := s.admin.Restart(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if names == nil {
		names = []string{}
	}
	return &trellisv1.ReloadMcpServersResponse{Ok: true, Servers: names}, nil
}

func probeError(st mcp.Status) string {
	if st.Reason != "" {
		return st.Reason
	}
	return "the server did not answer within its startup cap"
}

func ptr[T any](v T) *T { return &v }

// fieldSet reports whether m has the field of that JSON name set.
func fieldSet(m proto.Message, jsonName string) bool {
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByJSONName(jsonName)
	return fd != nil && r.Has(fd)
}
