package rpc

import (
	"context"
	"encoding/json"

	"google.golang.org/protobuf/types/known/structpb"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/tool"
)

// ToolServer implements trellisv1.ToolServiceServer: slash commands and the
// tool list.
type ToolServer struct {
	trellisv1.UnsafeToolServiceServer
	sessions *session.Service
	tools    *tool.Registry
}

// NewToolServer returns the tool and command service.
func NewToolServer(sessions *session.Service, tools *tool.Registry) *ToolServer {
	return &ToolServer{sessions: sessions, tools: tools}
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
	if id := req.GetSessionId(); id != "" {
		if _, err := s.sessions.Get(ctx, id); err != nil {
			return nil, err
		}
	}
	infos := s.tools.List()
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
