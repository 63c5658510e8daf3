package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// Provider is a model vendor. Implementations must be safe for concurrent use.
type Provider interface {
	// Name returns the vendor name ("fake", "openai", "anthropic").
	Name() string
	// Stream starts one model call. Cancelling ctx must end the call at once:
	// Stream and every later Stream.Next return promptly with an error.
	Stream(ctx context.Context, req Request) (Stream, error)
}

// Stream yields the chunks of one model call in order. Next returns io.EOF
// after the last chunk; any other error means the call failed. Close releases
// the call's resources and may be called at any time, more than once.
type Stream interface {
	Next() (Chunk, error)
	Close() error
}

// ChunkKind says which field of a Chunk is set.
type ChunkKind int

// The chunk kinds. A well-behaved stream sends reasoning and text deltas in
// any order, complete tool calls, at most one usage chunk and one stop chunk.
const (
	ChunkText      ChunkKind = iota + 1 // Chunk.Text is a delta of the answer
	ChunkReasoning                      // Chunk.Text is a delta of the reasoning
	ChunkToolCall                       // Chunk.ToolCall is complete
	ChunkUsage                          // Chunk.Usage counts the whole call
	ChunkStop                           // Chunk.StopReason ends the call
)

var chunkKindNames = map[ChunkKind]string{
	ChunkText: "text", ChunkReasoning: "reasoning", ChunkToolCall: "tool_call",
	ChunkUsage: "usage", ChunkStop: "stop",
}

func (k ChunkKind) String() string {
	if s, ok := chunkKindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("ChunkKind(%d)", int(k))
}

// Chunk is one piece of a streamed model call.
type Chunk struct {
	Kind       ChunkKind
	Text       string
	ToolCall   ToolCall
	Usage      Usage
	StopReason StopReason
}

// ContextWindower is an optional capability: the size, in tokens, of a model's
// context window, or 0 when unknown.
type ContextWindower interface {
	ContextWindow(model string) int
}

// ModelLister is an optional capability: the models a provider offers and the
// one it uses when a session names none.
type ModelLister interface {
	DefaultModel() string
	Models() []string
}

// NewError returns the error a provider reports for a failed call: it carries
// the protocol code provider_error with data {provider, status} (status 0 when
// there was no HTTP status). The message must be the vendor's own words or
// ours, never a credential.
func NewError(provider string, status int, format string, args ...any) *errs.Error {
	return errs.New(errcode.ProviderError, format, args...).
		WithData("provider", provider).
		WithData("status", status)
}

// Response is a whole model call, gathered by Collect.
type Response struct {
	Text       string
	Reasoning  string
	ToolCalls  []ToolCall
	Usage      Usage
	StopReason StopReason
}

// Collect reads s to the end and closes it. It is for callers that do not
// stream, such as summarising a history.
func Collect(s Stream) (Response, error) {
	defer s.Close()
	var r Response
	var text, reasoning strings.Builder
	for {
		c, err := s.Next()
		if errors.Is(err, io.EOF) {
			r.Text, r.Reasoning = text.String(), reasoning.String()
			return r, nil
		}
		if err != nil {
			r.Text, r.Reasoning = text.String(), reasoning.String()
			return r, err
		}
		switch c.Kind {
		case ChunkText:
			text.WriteString(c.Text)
		case ChunkReasoning:
			reasoning.WriteString(c.Text)
		case ChunkToolCall:
			r.ToolCalls = append(r.ToolCalls, c.ToolCall)
		case ChunkUsage:
			r.Usage = c.Usage
		case ChunkStop:
			r.StopReason = c.StopReason
		}
	}
}

// EstimateTokens is the rough token count used when a vendor reports none:
// one token per four bytes, rounded up.
func EstimateTokens(s string) int { return (len(s) + 3) / 4 }

// imageTokens is the estimate of one image of a tool result: about what
// both vendors count for a viewport-sized screenshot, whatever its bytes.
const imageTokens = 1600

// EstimateRequestTokens estimates the input tokens of req: its system prompt,
// messages (their images by imageTokens each) and tool specs.
func EstimateRequestTokens(req Request) int {
	n := len(req.System)
	for _, m := range req.Messages {
		n += len(m.Role) + len(m.Text) + len(m.Reasoning)
		for _, c := range m.ToolCalls {
			n += len(c.ID) + len(c.Name) + len(c.Arguments)
		}
		if r := m.ToolResult; r != nil {
			n += len(r.CallID) + len(r.Name) + len(r.Content) + 4*imageTokens*len(r.Images)
		}
	}
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	return (n + 3) / 4
}

// ModelList is what a provider's Models returns: the default model first,
// then the configured models, else the known ones, each once.
func ModelList(def string, configured, known []string) []string {
	out := []string{def}
	list := configured
	if len(list) == 0 {
		list = known
	}
	for _, m := range list {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// ConfiguredWindow is what a provider's ContextWindow returns: the
// configured window when positive, else the window known (by the vendor's
// table) for model, or for the default model when model is "".
func ConfiguredWindow(configured int, model, defaultModel string, known func(model string) int) int {
	if configured > 0 {
		return configured
	}
	if model == "" {
		model = defaultModel
	}
	return known(model)
}
