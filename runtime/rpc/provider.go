package rpc

import (
	"context"
	"strings"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/pricing"
	"github.com/trellis-run/trellis/runtime/provider"
)

// ProviderServer implements trellisv1.ProviderServiceServer.
type ProviderServer struct {
	trellisv1.UnsafeProviderServiceServer
	providers *provider.Service
}

// NewProviderServer returns the provider service.
func NewProviderServer(providers *provider.Service) *ProviderServer {
	return &ProviderServer{providers: providers}
}

// ListProviders describes every known vendor; it never returns a secret.
func (s *ProviderServer) ListProviders(ctx context.Context, _ *trellisv1.ListProvidersRequest) (*trellisv1.ListProvidersResponse, error) {
	infos, err := s.providers.List(ctx)
	if err != nil {
		return nil, err
	}
	resp := &trellisv1.ListProvidersResponse{Providers: make([]*trellisv1.Provider, 0, len(infos))}
	for _, i := range infos {
		resp.Providers = append(resp.Providers, &trellisv1.Provider{
			Vendor: i.Vendor, Label: i.Label, DefaultModel: i.DefaultModel, Models: i.Models,
			Configured: i.Configured, IsDefault: i.Default, BaseUrl: i.BaseURL, AuthMethods: i.AuthMethods,
		})
	}
	return resp, nil
}

// ConfigureProvider stores a vendor's configuration.
func (s *ProviderServer) ConfigureProvider(ctx context.Context, req *trellisv1.ConfigureProviderRequest) (*trellisv1.ConfigureProviderResponse, error) {
	if req.GetVendor() == "" {
		return nil, errs.New(errcode.InvalidParams, "vendor is required: one of openai, anthropic, fake")
	}
	c := req.GetConfig()
	if c == nil {
		c = &trellisv1.ProviderConfig{} // reported as an empty config
	}
	key, err := credentialOf(c)
	if err != nil {
		return nil, err
	}
	u := provider.Update{APIKey: key, BaseURL: c.BaseUrl, Model: c.Model, Default: c.IsDefault}
	if len(c.GetModels()) > 0 {
		u.Models = c.GetModels()
	}
	if c.ContextWindow != nil {
		w := int(c.GetContextWindow())
		u.ContextWindow = &w
	}
	if u.Prices, err = pricesOf(req.GetVendor(), c); err != nil {
		return nil, err
	}
	if err := s.providers.Configure(ctx, req.GetVendor(), u); err != nil {
		return nil, err
	}
	return &trellisv1.ConfigureProviderResponse{Ok: true}, nil
}

// pricesOf reads a provider configuration's prices (nil: unchanged; empty:
// cleared), refusing bad ones naming each field.
func pricesOf(vendor string, c *trellisv1.ProviderConfig) (map[string]pricing.Price, error) {
	if c.GetClearPrices() {
		if len(c.GetPrices()) > 0 {
			return nil, errs.New(errcode.InvalidParams, "give prices or clear_prices, not both")
		}
		return map[string]pricing.Price{}, nil
	}
	if len(c.GetPrices()) == 0 {
		return nil, nil
	}
	entries := make(map[string]pricing.Entry, len(c.GetPrices()))
	for model, p := range c.GetPrices() {
		if p == nil {
			p = &trellisv1.ModelPrice{}
		}
		entries[model] = pricing.Entry{Input: p.GetInput(), Output: p.GetOutput(), CacheRead: p.CacheRead, CacheWrite: p.CacheWrite, Reasoning: p.Reasoning}
	}
	prices, err := pricing.Entries(vendor, entries)
	if err != nil {
		return nil, errs.New(errcode.InvalidParams, "%v", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return prices, nil
}

// LoginWeb answers login_unsupported: no vendor has a web login.
func (s *ProviderServer) LoginWeb(ctx context.Context, req *trellisv1.LoginWebRequest) (*trellisv1.LoginWebResponse, error) {
	if req.GetVendor() == "" {
		return nil, errs.New(errcode.InvalidParams, "vendor is required: one of openai, anthropic, fake")
	}
	url, err := s.providers.LoginWeb(ctx, req.GetVendor(), req.GetMethod())
	if err != nil {
		return nil, err
	}
	return &trellisv1.LoginWebResponse{Url: url}, nil
}

// credentialOf reads the API key from api_key or its protocol 1.x names
// token and access_token: they name one secret, so two different values
// are invalid_params (the message never shows them).
func credentialOf(c *trellisv1.ProviderConfig) (*string, error) {
	var key *string
	for _, f := range []struct {
		name string
		v    *string
	}{{"api_key", c.ApiKey}, {"token", c.Token}, {"access_token", c.AccessToken}} {
		if f.v == nil {
			continue
		}
		if key != nil && *key != *f.v {
			return nil, errs.New(errcode.InvalidParams, "config gives different values in api_key, token and access_token (%s differs): they are one credential; send one of them", f.name)
		}
		key = f.v
	}
	return key, nil
}

// ListModels lists a vendor's models.
func (s *ProviderServer) ListModels(ctx context.Context, req *trellisv1.ListModelsRequest) (*trellisv1.ListModelsResponse, error) {
	l, err := s.providers.Models(ctx, req.GetVendor())
	if err != nil {
		return nil, err
	}
	models := l.Models
	if models == nil {
		models = []string{}
	}
	return &trellisv1.ListModelsResponse{Vendor: l.Vendor, Models: models, Current: l.Current,
		Source: l.Source, Detail: l.Detail, Vision: map[string]bool{}}, nil
}

// RemoveProvider forgets a vendor's configuration.
func (s *ProviderServer) RemoveProvider(ctx context.Context, req *trellisv1.RemoveProviderRequest) (*trellisv1.RemoveProviderResponse, error) {
	if req.GetVendor() == "" {
		return nil, errs.New(errcode.InvalidParams, "vendor is required: openai or anthropic")
	}
	if err := s.providers.Remove(ctx, req.GetVendor()); err != nil {
		return nil, err
	}
	return &trellisv1.RemoveProviderResponse{Ok: true}, nil
}

// TestProvider sends one short completion.
func (s *ProviderServer) TestProvider(ctx context.Context, req *trellisv1.TestProviderRequest) (*trellisv1.TestProviderResponse, error) {
	if req.GetProvider() == "" {
		return nil, errs.New(errcode.InvalidParams, "provider is required: one of openai, anthropic, fake")
	}
	r, err := s.providers.Test(ctx, req.GetProvider(), req.GetModel())
	if err != nil {
		return nil, err
	}
	out := &trellisv1.TestProviderResponse{Ok: r.OK, Provider: req.GetProvider(), Model: r.Model, LatencyMs: r.Latency.Milliseconds()}
	if r.OK {
		out.Reply = &r.Reply
	} else {
		out.Error = &r.Error
	}
	return out, nil
}
