package openai

import (
	"context"
	"net/http"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/trellis-run/trellis/runtime/llm"
)

const (
	// Vendor is the name this provider registers under and reports as Name.
	Vendor = "openai"
	// DefaultBaseURL is OpenAI's own endpoint.
	DefaultBaseURL = "https://api.openai.com/v1"
	// DefaultModel is used when neither the session nor the configuration
	// names a model.
	DefaultModel = "gpt-4.1"
)

// KnownModels are the models listed when the configuration lists none.
var KnownModels = []string{"gpt-4.1", "gpt-4.1-mini", "gpt-4o", "gpt-4o-mini", "o3", "o4-mini"}

// Config configures a Provider. An empty APIKey sends no Authorization
// header (local servers).
type Config = llm.EndpointConfig

// Provider streams Chat Completions. It implements llm.Provider,
// llm.ModelLister and llm.ContextWindower, and is safe for concurrent use.
type Provider struct {
	cfg    Config
	client sdk.Client
	label  string // how messages name this provider
	retry  llm.RetryPolicy
}

// New returns a provider for cfg.
func New(cfg Config) *Provider {
	cfg = cfg.WithDefaults(DefaultBaseURL, DefaultModel)
	p := &Provider{cfg: cfg, label: llm.EndpointLabel(Vendor, cfg.BaseURL, DefaultBaseURL)}
	// Our retry policy is the one in force: the SDK must not retry too.
	p.client = sdk.NewClient(
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0),
	)
	p.retry = cfg.Retry.Logged(cfg.Log, p.label)
	return p
}

// Name returns "openai".
func (p *Provider) Name() string { return Vendor }

// DefaultModel returns the configured model, else DefaultModel.
func (p *Provider) DefaultModel() string { return p.cfg.Model }

// Models returns the configured models (the default model first), else
// KnownModels when the endpoint is OpenAI's.
func (p *Provider) Models() []string {
	var known []string
	if p.cfg.BaseURL == DefaultBaseURL {
		known = KnownModels
	}
	return llm.ModelList(p.cfg.Model, p.cfg.Models, known)
}

// ContextWindow returns the configured window, else the window of a known
// model, else 0.
func (p *Provider) ContextWindow(model string) int {
	return llm.ConfiguredWindow(p.cfg.ContextWindow, model, p.cfg.Model, ContextWindow)
}

// Stream starts one Chat Completions call. Failures before the first token
// are retried under the configured policy; the returned stream yields
// deltas as they arrive and the tool calls, usage and stop reason at the end.
func (p *Provider) Stream(ctx context.Context, req llm.Request) (llm.Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	params := p.params(req)
	return p.retry.Open(ctx, func(ctx context.Context) (llm.Stream, error) {
		rec := &llm.FailureRecorder{Limiter: p.retry.Limiter}
		// The SDK makes the request (auth, errors, retries of the
		// connection) and frames the SSE events; the chunks are decoded
		// into our own lean type, which reads only what a delta needs, in
		// one pass (chunkReader), a fraction of the SDK's reflective
		// decoding of the whole ChatCompletionChunk.
		var raw *http.Response
		s := p.client.Chat.Completions.NewStreaming(ctx, params, option.WithMiddleware(rec.Middleware), option.WithResponseInto(&raw))
		if err := s.Err(); err != nil {
			s.Close()
			return nil, p.callError(ctx, rec, err)
		}
		return &stream{p: p, ctx: ctx, sdk: &chunkReader{dec: ssestream.NewDecoder(raw)}, calls: map[int64]*callBuilder{}}, nil
	})
}
