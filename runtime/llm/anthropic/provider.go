package anthropic

import (
	"context"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/trellis-run/trellis/runtime/llm"
)

const (
	// Vendor is the name this provider registers under and reports as Name.
	Vendor = "anthropic"
	// DefaultBaseURL is Anthropic's own endpoint.
	DefaultBaseURL = "https://api.anthropic.com"
	// DefaultModel is used when neither the session nor the configuration
	// names a model.
	DefaultModel = "claude-sonnet-4-5"
)

// Config configures a Provider. Its BaseURL is the endpoint without the
// API version: a trailing /v1 is dropped, since the SDK adds it.
type Config = llm.EndpointConfig

// Provider streams Messages. It implements llm.Provider, llm.ModelLister
// and llm.ContextWindower, and is safe for concurrent use.
type Provider struct {
	cfg    Config
	client sdk.Client
	label  string
	retry  llm.RetryPolicy
}

// New returns a provider for cfg.
func New(cfg Config) *Provider {
	cfg = cfg.WithDefaults(DefaultBaseURL, DefaultModel)
	cfg.BaseURL = strings.TrimSuffix(cfg.BaseURL, "/v1")
	p := &Provider{cfg: cfg, label: llm.EndpointLabel(Vendor, cfg.BaseURL, DefaultBaseURL)}
	// The configuration decides everything (no credential chain from the
	// environment), and our retry policy is the one in force.
	p.client = sdk.NewClient(
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0),
	)
	p.retry = cfg.Retry.Logged(cfg.Log, p.label)
	return p
}

// Name returns "anthropic".
func (p *Provider) Name() string { return Vendor }

// DefaultModel returns the configured model, else DefaultModel.
func (p *Provider) DefaultModel() string { return p.cfg.Model }

// Models returns the configured models (the default model first), else
// KnownModels.
func (p *Provider) Models() []string {
	return llm.ModelList(p.cfg.Model, p.cfg.Models, KnownModels)
}

// ContextWindow returns the configured window, else the window of a known
// model, else 0.
func (p *Provider) ContextWindow(model string) int {
	return llm.ConfiguredWindow(p.cfg.ContextWindow, model, p.cfg.Model, ContextWindow)
}

// Stream starts one Messages call. Failures before the first token are
// retried under the configured policy.
func (p *Provider) Stream(ctx context.Context, req llm.Request) (llm.Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	params := p.params(req)
	return p.retry.Open(ctx, func(ctx context.Context) (llm.Stream, error) {
		rec := &llm.FailureRecorder{Limiter: p.retry.Limiter}
		s := p.client.Messages.NewStreaming(ctx, params, option.WithMiddleware(rec.Middleware))
		if err := s.Err(); err != nil {
			s.Close()
			return nil, p.callError(ctx, rec, err)
		}
		return &stream{p: p, ctx: ctx, sdk: s, tools: map[int64]*toolBlock{}}, nil
	})
}
