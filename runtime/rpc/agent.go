package rpc

import (
	"context"
	"strings"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/agents"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/session"
)

// AgentServer implements trellisv1.AgentServiceServer over the agents service.
type AgentServer struct {
	trellisv1.UnsafeAgentServiceServer
	agents   *agents.Service
	channels ChannelBinder
	mine     CallerSessions
}

// CallerSessions lists the live chat sessions whose origin is the caller's
// (session.Service.OriginSessions).
type CallerSessions func(origin string) []session.OriginSession

// callerSession resolves an omitted sessionId to the caller's one session,
// or explains in an invalid_params error naming field why it cannot.
func callerSession(ctx context.Context, mine CallerSessions, field, method string) (session.OriginSession, error) {
	var got []session.OriginSession
	if mine != nil {
		got = mine(originOf(ctx))
	}
	switch len(got) {
	case 1:
		return got[0], nil
	case 0:
		return session.OriginSession{}, errs.New(errcode.InvalidParams,
			"%s: %s is required: this connection has no open session to default to", method, field)
	}
	ids := make([]string, len(got))
	for i, g := range got {
		ids[i] = g.SessionID
	}
	return session.OriginSession{}, errs.New(errcode.InvalidParams,
		"%s: %s is required: this connection has %d open sessions (%s), so none is the default",
		method, field, len(got), strings.Join(ids, ", "))
}

// ChannelBinder is what agent.bindChannel and agent.list need of the gateway.
type ChannelBinder interface {
	BindAgentChannel(ctx context.Context, agent, channel, credentialsRef string) error
	AgentChannels(agent string) []string
}

// AgentServerOptions are what the agent service takes from the gateway and
// the session service.
type AgentServerOptions struct {
	// Channels is the gateway; without it agent.bindChannel answers
	// tool_inactive.
	Channels ChannelBinder
	// CallerSessions lets agent.spawn without sessionId find the caller's
	// session; without it such a call is invalid_params.
	CallerSessions CallerSessions
}

// NewAgentServer returns the agent service.
func NewAgentServer(a *agents.Service, o AgentServerOptions) *AgentServer {
	return &AgentServer{agents: a, channels: o.Channels, mine: o.CallerSessions}
}

// ListAgents lists the definitions and the live sub-agents.
func (s *AgentServer) ListAgents(ctx context.Context, _ *trellisv1.ListAgentsRequest) (*trellisv1.ListAgentsResponse, error) {
	entries, err := s.agents.List(ctx)
	if err != nil {
		return nil, err
	}
	out := &trellisv1.ListAgentsResponse{Agents: make([]*trellisv1.Agent, 0, len(entries))}
	for _, e := range entries {
		out.Agents = append(out.Agents, &trellisv1.Agent{
			Name: e.Name, Description: e.Description, Kind: e.Kind, Source: e.Source,
			Path: optional(e.Path), AgentId: optional(e.AgentID), Status: optional(e.Status),
			Task: optional(e.Task), SessionId: optional(e.SessionID), ParentSessionId: optional(e.ParentSessionID),
			Channels: s.agentChannels(e.Name, e.Kind),
		})
	}
	return out, nil
}

// CreateAgent writes a definition into <home>/agents/.
//
// Without a name (or with named=false, protocol 1.x) the name is generated
// from the description.
func (s *AgentServer) CreateAgent(_ context.Context, req *trellisv1.CreateAgentRequest) (*trellisv1.CreateAgentResponse, error) {
	name := req.GetName()
	if req.Named != nil && !req.GetNamed() && name != "" {
		return nil, errs.New(errcode.InvalidParams, "named is false, which asks for a generated name, but name %q is given: drop one of them", name)
	}
	if name == "" {
		if strings.TrimSpace(req.GetDescription()) == "" {
			return nil, errs.New(errcode.InvalidParams, "name or description is required: the name is generated from the description")
		}
		var err error
		if name, err = s.agents.Definitions().FreeName(req.GetDescription()); err != nil {
			return nil, err
		}
	}
	budget := session.Limits{MaxCostMicroUSD: req.MaxCostMicroUsd, MaxTokens: req.MaxTokens}
	if err := budget.Validate(); err != nil {
		return nil, err
	}
	d, err := s.agents.Definitions().Create(agents.Definition{
		Name: name, Description: req.GetDescription(), Instructions: req.GetInstructions(),
		Tools: req.GetTools(), Model: req.GetModel(), MaxCostMicroUSD: req.MaxCostMicroUsd, MaxTokens: req.MaxTokens,
	})
	if err != nil {
		return nil, err
	}
	return &trellisv1.CreateAgentResponse{Name: d.Name, Path: d.Path}, nil
}

// SpawnAgent queues a sub-agent and answers with its id.
//
// Without sessionId the child is attached to the caller's session when the
// caller has exactly one (protocol 1.x clients omit it); otherwise the call
// is invalid_params naming sessionId, so that no child runs unseen.
func (s *AgentServer) SpawnAgent(ctx context.Context, req *trellisv1.SpawnAgentRequest) (*trellisv1.SpawnAgentResponse, error) {
	parent := req.GetSessionId()
	if name := req.GetName(); name != "" && parent == "" {
		// An unknown agent is the first thing to say.
		if _, err := s.agents.Definitions().Get(name); err != nil && errs.Is(err, errcode.NotFound) {
			return nil, err
		}
	}
	if parent == "" {
		own, err := callerSession(ctx, s.mine, "sessionId", "agent.spawn")
		if err != nil {
			return nil, err
		}
		parent = own.SessionID
	}
	id, err := s.agents.Spawn(ctx, agents.SpawnParams{
		Name: req.GetName(), Task: req.GetTask(), ParentSessionID: parent, Model: req.GetModel(),
		Origin: originOf(ctx), MayRun: callerMayRun(ctx),
	})
	if err != nil {
		return nil, err
	}
	return &trellisv1.SpawnAgentResponse{AgentId: id}, nil
}

// BindChannel adds a gateway binding whose target is the agent.
func (s *AgentServer) BindChannel(ctx context.Context, req *trellisv1.BindChannelRequest) (*trellisv1.BindChannelResponse, error) {
	if s.channels == nil {
		return nil, errs.New(errcode.ToolInactive, "agent.bindChannel needs the gateway, which this daemon does not run")
	}
	if err := s.channels.BindAgentChannel(ctx, req.GetName(), req.GetChannel(), req.GetCredentialsRef()); err != nil {
		return nil, err
	}
	return &trellisv1.BindChannelResponse{Ok: true}, nil
}

// agentChannels lists a definition's bound channels (sub-agents have none).
func (s *AgentServer) agentChannels(name, kind string) []string {
	if s.channels == nil || kind != "definition" {
		return []string{}
	}
	return s.channels.AgentChannels(name)
}

// DeleteAgent removes a definition.
func (s *AgentServer) DeleteAgent(_ context.Context, req *trellisv1.DeleteAgentRequest) (*trellisv1.DeleteAgentResponse, error) {
	if err := s.agents.Definitions().Delete(req.GetName()); err != nil {
		return nil, err
	}
	return &trellisv1.DeleteAgentResponse{Ok: true}, nil
}

// StartTeam splits a task among sub-agents of a session.
func (s *AgentServer) StartTeam(ctx context.Context, req *trellisv1.StartTeamRequest) (*trellisv1.StartTeamResponse, error) {
	id, err := s.agents.StartTeam(ctx, req.GetSessionId(), int(req.GetN()), req.GetTask())
	if err != nil {
		return nil, err
	}
	return &trellisv1.StartTeamResponse{TeamId: id}, nil
}

// TeamStatus reports a team ("" = the latest).
func (s *AgentServer) TeamStatus(ctx context.Context, req *trellisv1.TeamStatusRequest) (*trellisv1.TeamStatusResponse, error) {
	st, err := s.agents.TeamStatus(ctx, req.GetTeamId())
	if err != nil {
		return nil, err
	}
	out := &trellisv1.TeamStatusResponse{TeamId: st.TeamID, State: st.State, Task: st.Task, Tasks: make([]*trellisv1.TeamTask, 0, len(st.Tasks))}
	for _, t := range st.Tasks {
		out.Tasks = append(out.Tasks, &trellisv1.TeamTask{TaskId: t.TaskID, Title: t.Title, Status: t.Status,
			Assignee: optional(t.Assignee), Retries: int32(t.Retries)})
	}
	return out, nil
}
