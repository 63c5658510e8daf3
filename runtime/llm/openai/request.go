package openai

import (
	"encoding/base64"
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
	// A tool message carries text only, and the tool messages answering
	// one assistant message must follow it together: the images of a run
	// of tool results travel in one user message after the run.
	var images []sdk.ChatCompletionContentPartUnionParam
	flush := func() {
		if len(images) > 0 {
			msgs = append(msgs, sdk.UserMessage(images))
			images = nil
		}
	}
	for _, m := range req.Messages {
		if m.Role != llm.RoleTool {
			flush()
		}
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
				for i, img := range r.Images {
					if i == 0 {
						images = append(images, sdk.TextContentPart("The images "+r.Name+" returned (call "+r.CallID+"):"))
					}
					images = append(images, sdk.ImageContentPart(sdk.ChatCompletionContentPartImageImageURLParam{
						URL: "data:" + img.MediaType + ";base64," + base64.StdEncoding.EncodeToString(img.Data),
					}))
				}
			}
		}
	}
	flush()
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
