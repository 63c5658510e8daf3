package anthropic

import (
	"encoding/base64"
	"encoding/json"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/trellis-run/trellis/runtime/llm"
)

// emptyToolOutput stands in for a tool result with no text.
const emptyToolOutput = "(no output)"

// params translates a request into Messages parameters. The Messages API
// wants alternating roles, so consecutive messages of one role are merged:
// the tool results answering one assistant turn travel together in one user
// message, with any user text after them. Reasoning is not sent back (a
// thinking block needs its signature, which the history does not keep).
func (p *Provider) params(req llm.Request) sdk.MessageNewParams {
	model := req.Model
	if model == "" {
		model = p.cfg.Model
	}
	type turn struct {
		user   bool
		blocks []sdk.ContentBlockParamUnion
	}
	var turns []turn
	add := func(user bool, blocks ...sdk.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if n := len(turns); n > 0 && turns[n-1].user == user {
			turns[n-1].blocks = append(turns[n-1].blocks, blocks...)
			return
		}
		turns = append(turns, turn{user: user, blocks: blocks})
	}
	for _, m := range req.Messages {
		switch m.Role {
		case llm.RoleUser:
			if m.Text != "" {
				add(true, sdk.NewTextBlock(m.Text))
			}
		case llm.RoleAssistant:
			var blocks []sdk.ContentBlockParamUnion
			if m.Text != "" {
				blocks = append(blocks, sdk.NewTextBlock(m.Text))
			}
			for _, c := range m.ToolCalls {
				blocks = append(blocks, sdk.NewToolUseBlock(c.ID, json.RawMessage(c.Arguments), c.Name))
			}
			add(false, blocks...)
		case llm.RoleTool:
			if r := m.ToolResult; r != nil {
				content := r.Content
				if content == "" {
					content = emptyToolOutput
				}
				add(true, toolResult(r, content))
			}
		}
	}
	msgs := make([]sdk.MessageParam, 0, len(turns))
	for _, t := range turns {
		if t.user {
			msgs = append(msgs, sdk.NewUserMessage(t.blocks...))
		} else {
			msgs = append(msgs, sdk.NewAssistantMessage(t.blocks...))
		}
	}
	maxTokens := int64(req.MaxTokens)
	if maxTokens <= 0 {
		maxTokens = defaultMaxTokens(model)
	}
	// Effort becomes an extended-thinking budget; max_tokens must exceed
	// it, so it grows to leave room for the answer.
	if budget := thinkingBudget[req.Effort]; budget > 0 && maxTokens <= budget {
		maxTokens = budget + 4096
	}
	params := sdk.MessageNewParams{Model: sdk.Model(model), MaxTokens: maxTokens, Messages: msgs}
	if budget := thinkingBudget[req.Effort]; budget > 0 {
		params.Thinking = sdk.ThinkingConfigParamOfEnabled(budget)
	}
	if req.System != "" {
		params.System = []sdk.TextBlockParam{{Text: req.System}}
	}
	for _, t := range req.Tools {
		tool := sdk.ToolParam{Name: t.Name, InputSchema: inputSchema(t.InputSchema)}
		if t.Description != "" {
			tool.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, sdk.ToolUnionParam{OfTool: &tool})
	}
	return params
}

// toolResult is the tool_result block of r: its text, then its images as
// base64 image blocks, which the Messages API accepts inside a tool result.
func toolResult(r *llm.ToolResult, text string) sdk.ContentBlockParamUnion {
	block := sdk.NewToolResultBlock(r.CallID, text, r.IsError)
	for _, img := range r.Images {
		block.OfToolResult.Content = append(block.OfToolResult.Content, sdk.ToolResultBlockParamContentUnion{
			OfImage: &sdk.ImageBlockParam{Source: sdk.ImageBlockParamSourceUnion{OfBase64: &sdk.Base64ImageSourceParam{
				Data: base64.StdEncoding.EncodeToString(img.Data), MediaType: sdk.Base64ImageSourceMediaType(img.MediaType),
			}}},
		})
	}
	return block
}

// inputSchema splits a tool's JSON Schema into the fields the SDK names and
// the rest; a missing or unreadable schema becomes an object with no
// properties.
func inputSchema(raw json.RawMessage) sdk.ToolInputSchemaParam {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return sdk.ToolInputSchemaParam{Properties: map[string]any{}}
	}
	var s sdk.ToolInputSchemaParam
	if props, ok := m["properties"]; ok {
		s.Properties = props
	} else {
		s.Properties = map[string]any{}
	}
	if req, ok := m["required"].([]any); ok {
		for _, r := range req {
			if name, ok := r.(string); ok {
				s.Required = append(s.Required, name)
			}
		}
	}
	for k, v := range m {
		switch k {
		case "type", "properties", "required":
		default:
			if s.ExtraFields == nil {
				s.ExtraFields = map[string]any{}
			}
			s.ExtraFields[k] = v
		}
	}
	return s
}

// thinkingBudget maps llm.Request.Effort to budget_tokens (Anthropic's
// minimum is 1024).
var thinkingBudget = map[string]int64{"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "max": 32768}
