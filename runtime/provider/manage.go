package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/llm/fake"
	"github.com/trellis-run/trellis/runtime/store"
)

// Where a model listing came from (ModelListing.Source).
const (
	SourceLive     = "live"     // the vendor's endpoint answered
	SourceSettings = "settings" // the configured models list
	SourceCurated  = "curated"  // the models this build knows
)

// How long the calls to a vendor made by Models and Test may take.
const (
	listTimeout = 15 * time.Second
	testTimeout = 60 * time.Second
	// maxListBytes bounds a vendor's model listing.
	maxListBytes = 4 << 20
)

// ModelListing is what provider.models shows of one vendor.
type ModelListing struct {
	Vendor  string
	Current string // the model the vendor uses today
	Models  []string
	Source  string // SourceLive, SourceSettings or SourceCurated
	Detail  string // one line naming the source
}

// Models lists the models of vendor name ("" = the default vendor): those
// its endpoint reports when it is configured and answers, else the
// configured list, else the models this build knows. It never returns a
// secret, not even in Detail.
func (s *Service) Models(ctx context.Context, name string) (ModelListing, error) {
	if name == "" {
		name = s.Default()
	}
	v, ok := lookupVendor(name)
	if !ok {
		return ModelListing{}, unknownVendor(name)
	}
	if !v.real {
		return ModelListing{Vendor: v.name, Current: fake.DefaultModel, Models: []string{fake.DefaultModel},
			Source: SourceCurated, Detail: "the fake provider's one model"}, nil
	}
	if !compiledIn(v) {
		return ModelListing{}, notInBuild(v)
	}
	s.mu.Lock()
	r := s.resolve(v)
	model := r.Model
	if s.spec.Vendor == v.name && s.spec.Arg != "" {
		model = s.spec.Arg
	}
	s.mu.Unlock()
	lister := clients[v.name](llm.EndpointConfig{BaseURL: r.baseURL, Model: model, Models: r.Models, HTTPClient: s.opts.HTTPClient})
	out := ModelListing{Vendor: v.name, Current: lister.DefaultModel()}
	why := "it is not configured"
	if r.configured {
		live, err := s.listLive(ctx, v, r)
		if err == nil {
			out.Models, out.Source = live, SourceLive
			out.Detail = fmt.Sprintf("%d models reported by %s", len(live), publicURL(r.baseURL))
			return out, nil
		}
		why = err.Error()
		s.log.Info("listing a provider's models failed; answering the known ones", "vendor", v.name, "err", err)
	}
	out.Models = lister.Models()
	if len(r.Models) > 0 {
		out.Source, out.Detail = SourceSettings, fmt.Sprintf("the configured models (the endpoint was not asked or failed: %s)", why)
	} else {
		out.Source, out.Detail = SourceCurated, fmt.Sprintf("the models this build knows (the endpoint was not asked or failed: %s)", why)
	}
	return out, nil
}

// listLive asks v's endpoint for its models: GET <base>/models for OpenAI
// and compatible servers, <base>/v1/models for Anthropic, both answering
// {"data": [{"id": ...}]}. Errors name the status, never the key.
func (s *Service) listLive(ctx context.Context, v vendor, r resolved) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	base := strings.TrimRight(r.baseURL, "/")
	u := base + "/models"
	if v.name == Anthropic {
		u = base + "/v1/models"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("cannot ask %s", publicURL(r.baseURL))
	}
	switch {
	case v.name == Anthropic:
		req.Header.Set("x-api-key", r.apiKey)
		req.Header.Set("anthropic-version", "2023-06-01")
	case r.apiKey != "":
		req.Header.Set("Authorization", "Bearer "+r.apiKey)
	}
	resp, err := s.opts.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s did not answer within %s", publicURL(r.baseURL), listTimeout)
		}
		return nil, fmt.Errorf("%s could not be reached", publicURL(r.baseURL))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered HTTP %d", publicURL(r.baseURL), resp.StatusCode)
	}
	var body struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxListBytes)).Decode(&body); err != nil {
		return nil, fmt.Errorf("%s answered something other than a model list", publicURL(r.baseURL))
	}
	out := make([]string, 0, len(body.Data))
	for _, m := range body.Data {
		if m.ID != "" && validModel(m.ID) {
			out = append(out, m.ID)
		}
	}
	return out, nil
}

// Remove forgets what was configured for vendor name through Configure:
// its API key, its settings, and its choice as the default. A key or base
// URL the environment gives still applies.
func (s *Service) Remove(ctx context.Context, name string) error {
	v, ok := lookupVendor(name)
	if !ok {
		return unknownVendor(name)
	}
	if !v.real {
		return errs.New(errcode.InvalidParams, "the fake provider has no configuration to forget")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.secrets.store(ctx, v.name, ""); err != nil {
		return fmt.Errorf("forget the %s API key: %w", v.name, err)
	}
	if err := s.opts.Settings.DeleteSetting(ctx, store.Unfenced(), settingsNamespace, v.name); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("forget the %s settings: %w", v.name, err)
	}
	if s.saved == v.name {
		if err := s.opts.Settings.DeleteSetting(ctx, store.Unfenced(), settingsNamespace, defaultKey); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("clear the default provider: %w", err)
		}
		s.saved = ""
	}
	if s.chosen == v.name {
		s.chosen = ""
	}
	delete(s.keys, v.name)
	delete(s.stored, v.name)
	delete(s.cache, v.name)
	s.gen++
	s.log.Info("provider configuration removed", "vendor", v.name, "default", s.defaultLocked())
	return nil
}

// TestResult is what provider.test shows of one test call.
type TestResult struct {
	OK      bool
	Model   string
	Reply   string
	Error   string // why it failed; never a credential
	Latency time.Duration
}

// Test sends one short completion to vendor name with model ("" = the
// vendor's default) and reports what came back. A vendor that cannot be
// opened (not configured) is a failed test, not an error; an unknown
// vendor is not_found.
func (s *Service) Test(ctx context.Context, name, model string) (TestResult, error) {
	v, ok := lookupVendor(name)
	if !ok {
		return TestResult{}, unknownVendor(name)
	}
	if model != "" && !validModel(model) {
		return TestResult{}, errs.New(errcode.InvalidParams, "model %q is not a model name", model)
	}
	res := TestResult{Model: model}
	if res.Model == "" {
		if l, err := s.Models(ctx, v.name); err == nil {
			res.Model = l.Current
		}
	}
	p, err := s.Open(v.name)
	if err != nil {
		res.Error = messageOf(err)
		return res, nil
	}
	ctx, cancel := context.WithTimeout(ctx, testTimeout)
	defer cancel()
	start := time.Now()
	reply, err := complete(ctx, p, llm.Request{Model: model, MaxTokens: 32,
		Messages: []llm.Message{{Role: llm.RoleUser, Text: "Reply with the single word: ok"}}})
	res.Latency = time.Since(start)
	if err != nil {
		res.Error = messageOf(err)
		return res, nil
	}
	res.OK, res.Reply = true, strings.TrimSpace(reply)
	return res, nil
}

// complete runs one call of p and returns its text.
func complete(ctx context.Context, p llm.Provider, req llm.Request) (string, error) {
	st, err := p.Stream(ctx, req)
	if err != nil {
		return "", err
	}
	defer st.Close()
	var b strings.Builder
	for {
		c, err := st.Next()
		if errors.Is(err, io.EOF) {
			return b.String(), nil
		}
		if err != nil {
			return b.String(), err
		}
		if c.Kind == llm.ChunkText {
			b.WriteString(c.Text)
		}
	}
}

// messageOf is what a client is shown of err: the protocol message of an
// *errs.Error (the providers' errors are, and never hold a credential).
func messageOf(err error) string {
	var e *errs.Error
	if errors.As(err, &e) {
		return e.Msg
	}
	return err.Error()
}
