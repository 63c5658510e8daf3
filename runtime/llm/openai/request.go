package openai

import (
	"encoding/json"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/trellis-run/trellis/runtime/llm"
)

// emptyToolOutput stands in for a tool result with no text, which some
// servers refuse.
const emptyToolOutput = "(no output)"

// params translates a request into Chat Completions parameters. Reasoning
// is not sent back: servers that emit reasoning_content refuse it as input.
func (p *Provider) params(req llm.Request) sdk.ChatCompletionNewParams {
	model := req.Model
	if model == "" {
		model = p.cfg.Model
	}
	msgs := make([]sdk.ChatCompletionMessageParamUnion, 0, len(req.Messages)+1)
	if req.System != "" {
		msgs = append(msgs, sdk.SystemMessage(req.System))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case llm.RoleUser:
			msgs = append(msgs, sdk.UserMessage(m.Text))
		case llm.RoleAssistant:
			if m.Text == "" && len(m.ToolCalls) == 0 {
				continue
			}
			var a sdk.ChatCompletionAssistantMessageParam
			if m.Text != "" {
				a.Content.OfString = sdk.String(m.Text)
			}
			for _, c := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
						ID: c.ID,
						Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name: c.Name, Arguments: string(c.Arguments),
						},
					},
				})
			}
			msgs = append(msgs, sdk.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case llm.RoleTool:
			if r := m.ToolResult; r != nil {
				content := r.Content
				if content == "" {
					content = emptyToolOutput
				}
				msgs = append(msgs, sdk.ToolMessage(content, r.CallID))
			}
		}
	}
	params := sdk.ChatCompletionNewParams{
		Model:         model,
		Messages:      msgs,
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)},
	}
	for _, t := range req.Tools {
		def := shared.FunctionDefinitionParam{Name: t.Name, Parameters: schemaObject(t.InputSchema)}
		if t.Description != "" {
			def.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, sdk.ChatCompletionFunctionTool(def))
	}
	if req.Effort != "" {
		params.ReasoningEffort = shared.ReasoningEffort(req.Effort)
	}
	if req.MaxTokens > 0 {
		// OpenAI's reasoning models accept only max_completion_tokens; many
		// compatible servers know only max_tokens.
		if p.cfg.BaseURL == DefaultBaseURL {
			params.MaxCompletionTokens = sdk.Int(int64(req.MaxTokens))
		} else {
			params.MaxTokens = sdk.Int(int64(req.MaxTokens))
		}
	}
	return params
}

// schemaObject decodes a tool's JSON Schema; a missing or unreadable one
// becomes an object with no properties.
func schemaObject(raw json.RawMessage) shared.FunctionParameters {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return shared.FunctionParameters{"type": "object", "properties": map[string]any{}}
	}
	return m
}
