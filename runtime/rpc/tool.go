package rpc

import (
	"context"
	"encoding/json"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/trellis-run/trellis/internal/broadcast"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/tool/mcp"
)

// Tools lists the tools of a session: the built-ins and the tools of the
// MCP servers it can use (a zero Info: the daemon's).
type Tools interface {
	List(ctx context.Context, s session.Info) []tool.Info
	// Unlent lists them without the tools clients lent (what a lent
	// tool's name may not take, or may replace).
	Unlent(ctx context.Context, s session.Info) []tool.Info
}

// MCPServers reports the state of the MCP servers.
type MCPServers interface {
	Statuses() []mcp.Status
	Watch(ctx context.Context) *broadcast.Watch[mcp.Status]
}

// ToolServer implements trellisv1.ToolServiceServer: slash commands, the
// tool list and the MCP servers' state.
type ToolServer struct {
	trellisv1.UnsafeToolServiceServer
	sessions *session.Service
	tools    Tools
	servers  MCPServers
	admin    MCPAdmin
	lent     LentOptions
}

// NewToolServer returns the tool and command service; admin changes the
// daemon's MCP servers.
func NewToolServer(sessions *session.Service, tools Tools, servers MCPServers, admin MCPAdmin) *ToolServer {
	return &ToolServer{sessions: sessions, tools: tools, servers: servers, admin: admin}
}

// ListMcpServers lists the configured MCP servers with their state; with
// a session, only those whose tools it can use: the daemon's and its agent
// definition's.
func (s *ToolServer) ListMcpServers(ctx context.Context, req *trellisv1.ListMcpServersRequest) (*trellisv1.ListMcpServersResponse, error) {
	usable := func(mcp.Status) bool { return true }
	if id := req.GetSessionId(); id != "" {
		sum, err := s.sessions.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		agent := sum.Row.Agent
		usable = func(st mcp.Status) bool { return st.Scope == "" || agent != "" && st.Scope == "agent:"+agent }
	}
	out := &trellisv1.ListMcpServersResponse{Servers: []*trellisv1.McpServer{}}
	for _, st := range s.servers.Statuses() {
		if usable(st) {
			out.Servers = append(out.Servers, mcpServerToProto(st))
		}
	}
	return out, nil
}

// WatchMcpServers streams mcp.changed: each state change of a server
// (starting, ready, failed, restarts) and each change of its tool list.
func (s *ToolServer) WatchMcpServers(_ *trellisv1.WatchMcpServersRequest, stream grpc.ServerStreamingServer[trellisv1.WatchMcpServersResponse]) error {
	w := s.servers.Watch(stream.Context())
	// The headers tell the client that it is watching.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for st := range w.Events() {
		if err := stream.Send(&trellisv1.WatchMcpServersResponse{Changed: &trellisv1.McpChanged{Server: mcpServerToProto(st)}}); err != nil {
			return err
		}
	}
	if errors.Is(w.Err(), broadcast.ErrLagged) {
		return errs.New(errcode.Overloaded, "this MCP watcher fell too far behind and was dropped: watch again, then call mcp.list")
	}
	return nil
}

func mcpServerToProto(st mcp.Status) *trellisv1.McpServer {
	return &trellisv1.McpServer{Name: st.Name, Scope: st.Scope, Transport: st.Transport, State: st.State,
		Reason: st.Reason, ToolCount: int32(st.ToolCount), Restarts: int32(st.Restarts)}
}

// ListCommands lists the built-in commands and the session's project commands.
func (s *ToolServer) ListCommands(ctx context.Context, req *trellisv1.ListCommandsRequest) (*trellisv1.ListCommandsResponse, error) {
	cmds, err := s.sessions.Commands(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	out := &trellisv1.ListCommandsResponse{Commands: make([]*trellisv1.Command, 0, len(cmds))}
	for _, c := range cmds {
		out.Commands = append(out.Commands, &trellisv1.Command{
			Name: c.Name, Summary: c.Summary, ArgsSchema: toStruct(c.ArgsSchema), Source: c.Source,
		})
	}
	return out, nil
}

// RunCommand runs a command as a turn.
func (s *ToolServer) RunCommand(ctx context.Context, req *trellisv1.RunCommandRequest) (*trellisv1.RunCommandResponse, error) {
	turnID, err := s.sessions.RunCommand(ctx, req.GetSessionId(), req.GetName(), req.GetArgs(), originOf(ctx))
	if err != nil {
		return nil, err
	}
	return &trellisv1.RunCommandResponse{TurnId: turnID}, nil
}

// ListTools lists the tools with their state.
func (s *ToolServer) ListTools(ctx context.Context, req *trellisv1.ListToolsRequest) (*trellisv1.ListToolsResponse, error) {
	var info session.Info
	if id := req.GetSessionId(); id != "" {
		sum, err := s.sessions.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		r := sum.Row
		info = session.Info{SessionID: r.SessionID, Workdir: r.Workdir, Mode: r.Mode, Kind: r.Kind, JobID: r.JobID, Agent: r.Agent, Backend: r.Backend,
			Origin: s.sessions.Origin(id)}
	}
	infos := s.tools.List(ctx, info)
	out := &trellisv1.ListToolsResponse{Tools: make([]*trellisv1.Tool, 0, len(infos))}
	for _, t := range infos {
		out.Tools = append(out.Tools, &trellisv1.Tool{
			Name: t.Name, Description: t.Description, PermissionTag: string(t.PermissionTag),
			State: t.State, Reason: t.Reason, Source: t.Source, Server: t.Server,
			InputSchema: toStruct(t.InputSchema),
		})
	}
	return out, nil
}

// toStruct converts a JSON object (a schema) to a Struct; invalid JSON or a
// value that is not an object yields an empty Struct.
func toStruct(raw json.RawMessage) *structpb.Struct {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		return &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	return s
}
