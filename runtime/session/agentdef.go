package session

import (
	"context"
	"slices"
	"strings"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/agent"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/store"
)

// turnSettings returns what a turn of row takes from its agent definition
// and its effort: the system prompt, the tools (restricted to the
// definition's list when it has one) and the effort. A definition deleted
// since the session was created is an error the turn reports.
func (s *Service) turnSettings(ctx context.Context, row store.Session, tools agent.Tools) (string, agent.Tools, string, error) {
	system := systemPrompt(row)
	effort := s.effortOf(ctx, row.SessionID)
	if row.Agent == "" || s.agents == nil {
		return system, tools, effort, nil
	}
	def, err := s.agents(row.Agent)
	if err != nil {
		if errs.Is(err, errcode.NotFound) {
			return "", nil, "", errs.New(errcode.NotFound, "the session's agent %s no longer exists: agent.create it again, or start a session without it", row.Agent)
		}
		return "", nil, "", err
	}
	// Sub-agents get the instructions in their task (the agents service).
	if def.Instructions != "" && row.Kind != store.KindSubagent {
		system += "\n\n" + def.Instructions
	}
	if len(def.Tools) > 0 {
		tools = allowedTools{next: tools, agent: def.Name, names: def.Tools}
	}
	return system, tools, effort, nil
}

// deniesExec reports whether session id was created with denyExec.
func (s *Service) deniesExec(ctx context.Context, id string) bool {
	raw, err := s.deps.Store.GetSetting(ctx, denyExecNamespace, id)
	return err == nil && string(raw) == "true"
}

// allowedTools enforces an agent definition's tools list: the model is
// offered only those tools, and a call to another one fails without
// running (a model may name a tool it was not offered).
type allowedTools struct {
	next  agent.Tools
	agent string
	names []string
}

func (a allowedTools) allowed(name string) bool {
	return slices.ContainsFunc(a.names, func(n string) bool { return strings.EqualFold(strings.TrimSpace(n), name) })
}

func (a allowedTools) Specs(ctx context.Context) []llm.ToolSpec {
	var out []llm.ToolSpec
	for _, t := range a.next.Specs(ctx) {
		if a.allowed(t.Name) {
			out = append(out, t)
		}
	}
	return out
}

func (a allowedTools) Run(ctx context.Context, call agent.ToolCall, progress func(agent.Progress)) agent.ToolResult {
	if !a.allowed(call.Name) {
		return agent.ToolResult{Error: "tool " + call.Name + " is not among agent " + a.agent + "'s tools (" + strings.Join(a.names, ", ") + ")"}
	}
	return a.next.Run(ctx, call, progress)
}
