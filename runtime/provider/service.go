package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/llm/fake"
	"github.com/trellis-run/trellis/runtime/pricing"
	"github.com/trellis-run/trellis/runtime/store"
)

// Sentinels of this package; each is wrapped in an errs.Error carrying the
// protocol code named here.
var (
	ErrUnknownVendor    = errors.New("unknown provider vendor")          // invalid_params
	ErrEmptyConfig      = errors.New("empty provider configuration")     // invalid_params
	ErrInvalidConfig    = errors.New("invalid provider configuration")   // invalid_params
	ErrNotConfigured    = errors.New("provider not configured")          // invalid_params
	ErrLoginUnsupported = errors.New("provider has no web login")        // login_unsupported
	ErrInvalidSpec      = errors.New("invalid provider spec at startup") // (startup only)
)

// settingsNamespace is the store namespace of the non-secret configuration:
// one key per vendor, and defaultKey naming the chosen default.
const (
	settingsNamespace = "providers"
	defaultKey        = "default"
)

// Info describes one vendor as provider.list shows it. It never holds a
// secret.
type Info struct {
	Vendor       string
	Label        string
	DefaultModel string
	Models       []string
	Configured   bool
	Default      bool
	BaseURL      string // without credentials or query
	AuthMethods  []string
}

// Options configure a Service.
type Options struct {
	// Home holds the secrets directory (<Home>/secrets).
	Home string
	// Settings persists the non-secret configuration.
	Settings store.SettingStore
	// Spec is --provider / $TRELLIS_PROVIDER: "vendor" or "vendor:arg"
	// (a script path for fake, a model for openai and anthropic). It makes
	// that vendor the default for this run.
	Spec string
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// HTTPClient is shared by the real vendors; nil builds one.
	HTTPClient *http.Client
	// Retry is the retry policy of the real vendors (zero = defaults).
	Retry llm.RetryPolicy
	// Limits bound the requests of each real vendor, every session's
	// together: each vendor has a limiter of its own (zero = no bound).
	Limits llm.Limits
	// LimitStore keeps the state of the limiters (and of the holds the
	// vendors' rate-limit headers ask for), shared by every daemon of the
	// store. nil: no request is limited (tests of the configuration alone,
	// which send none).
	LimitStore store.ProviderLimitStore
	// DaemonID owns this daemon's slots in LimitStore; those of its
	// previous run are given back at New.
	DaemonID string
	// Lease is a slot's lease (0 = llm.DefaultSlotLease): a daemon killed
	// mid-call holds its slots that long.
	Lease time.Duration
	Log   *slog.Logger
	// SharedKeys keeps the API keys in Settings (one row per vendor,
	// sealed with AES-256-GCM under SecretsKey) instead of <Home>/secrets:
	// for daemons sharing a PostgreSQL store, so that a key configured
	// through one daemon is used by all. Without a SecretsKey no key can
	// be stored (unsupported) and stored keys refuse the start.
	SharedKeys bool
	// SecretsKey is the 32-byte key every daemon of the cluster shares
	// (LoadSecretsKey); only with SharedKeys.
	SecretsKey []byte
}

// stored is a vendor's non-secret configuration in the settings table.
type stored struct {
	BaseURL       string   `json:"base_url,omitempty"`
	Model         string   `json:"model,omitempty"`
	Models        []string `json:"models,omitempty"`
	ContextWindow int      `json:"context_window,omitempty"`
	// Prices are the vendor's own prices by model (provider.configure
	// {prices}), in micro-dollars per million tokens.
	Prices map[string]pricing.Price `json:"prices,omitempty"`
}

// resolved is a vendor's effective configuration: what is stored, else
// what the environment says, else the vendor's defaults.
type resolved struct {
	apiKey, baseURL string
	stored
	configured bool
}

// Service is the provider configuration. It implements the session
// service's Providers (Open, Default) and is safe for concurrent use.
type Service struct {
	opts    Options
	log     *slog.Logger
	secrets keyStore
	reg     *llm.Registry
	spec    llm.Spec // from Options.Spec; Vendor "" when none

	mu     sync.Mutex
	stored map[string]stored
	keys   map[string]string // vendor → stored API key
	chosen string            // the default chosen for this run (spec or provider.configure)
	saved  string            // the default persisted by provider.configure
	cache  map[string]llm.Provider
	// limiters holds each real vendor's limiter (none without a
	// LimitStore), built once so that every provider opened for the vendor
	// shares it.
	limiters map[string]*llm.Limiter
	gen      int // counts configuration changes, so that a stale provider is not cached
}

// New loads the stored configuration and returns the service. An invalid
// Spec, or one naming a vendor that cannot be opened, is an error.
func New(ctx context.Context, opts Options) (*Service, error) {
	if opts.Settings == nil || opts.Home == "" {
		return nil, errors.New("provider: Options.Settings and Options.Home are required")
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = llm.NewHTTPClient()
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	s := &Service{
		opts: opts, log: opts.Log, secrets: fileKeys{secrets: secrets{dir: filepath.Join(opts.Home, "secrets")}, log: opts.Log},
		stored: map[string]stored{}, keys: map[string]string{}, cache: map[string]llm.Provider{},
	}
	if opts.SharedKeys {
		sealed, err := newSealedKeys(opts.Settings, opts.SecretsKey)
		if err != nil {
			return nil, err
		}
		s.secrets = sealed
	}
	st, saved, keys, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	s.stored, s.saved, s.keys = st, saved, keys
	if s.limiters, err = newLimiters(ctx, opts); err != nil {
		return nil, err
	}
	s.reg = llm.NewRegistry()
	s.reg.Register(Fake, fake.Open)
	for _, v := range vendors {
		if build := clients[v.name]; v.real && build != nil {
			s.reg.Register(v.name, func(model string) (llm.Provider, error) {
				return build(s.clientConfig(v, model)), nil
			})
		}
	}
	if opts.Spec != "" {
		spec, err := llm.ParseSpec(opts.Spec)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
		}
		if _, ok := lookupVendor(spec.Vendor); !ok {
			return nil, fmt.Errorf("%w: %q: unknown vendor (known: %s)", ErrInvalidSpec, opts.Spec, strings.Join(vendorNames(), ", "))
		}
		s.spec, s.chosen = spec, spec.Vendor
		if _, err := s.Open(spec.Vendor); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidSpec, opts.Spec, err)
		}
	}
	if out := LeftOut(); len(out) > 0 {
		s.log.Info("model providers left out of this build", "vendors", out, "buildTags", "trellis_lean / trellis_no_<vendor>")
	}
	if infos, err := s.List(ctx); err == nil {
		for _, i := range infos {
			s.log.Info("model provider", "vendor", i.Vendor, "configured", i.Configured, "default", i.Default,
				"baseUrl", i.BaseURL, "model", i.DefaultModel)
		}
	}
	return s, nil
}

// newLimiters returns the limiter of each real vendor (none without a
// LimitStore), after giving back the slots this daemon held in its previous
// run: a killed daemon's calls are gone.
func newLimiters(ctx context.Context, opts Options) (map[string]*llm.Limiter, error) {
	out := map[string]*llm.Limiter{}
	if opts.LimitStore == nil {
		return out, nil
	}
	if err := opts.LimitStore.ClearProviderSlots(ctx, opts.DaemonID); err != nil {
		return nil, fmt.Errorf("provider limits: %w", err)
	}
	for _, v := range vendors {
		if !v.real {
			continue
		}
		lim, err := llm.NewLimiter(llm.LimiterOptions{Store: opts.LimitStore, Provider: v.name, Owner: opts.DaemonID,
			Limits: opts.Limits, Lease: opts.Lease, Log: opts.Log})
		if err != nil {
			return nil, err
		}
		out[v.name] = lim
	}
	return out, nil
}

// WakeLimits ends the waits of this daemon's calls whenever another daemon
// of the store releases a slot of their provider, until ctx ends: on a
// store that announces releases (PostgreSQL). Without announcements a
// waiting call asks the store again at least every llm.DefaultLimitPoll.
func (s *Service) WakeLimits(ctx context.Context) {
	n, ok := s.opts.LimitStore.(store.ProviderLimitNotifier)
	if !ok {
		return
	}
	_ = n.ListenProviderLimits(ctx, func(provider string) {
		for name, lim := range s.limiters {
			if provider == "" || provider == name {
				lim.Wake()
			}
		}
	})
}

// read returns the stored settings, the saved default and the API keys.
func (s *Service) read(ctx context.Context) (map[string]stored, string, map[string]string, error) {
	rows, err := s.opts.Settings.ListSettings(ctx, settingsNamespace)
	if err != nil {
		return nil, "", nil, fmt.Errorf("load provider settings: %w", err)
	}
	all, saved := map[string]stored{}, ""
	for _, row := range rows {
		if row.Key == defaultKey {
			var name string
			if json.Unmarshal(row.Value, &name) == nil {
				saved = name
			}
			continue
		}
		var st stored
		if err := json.Unmarshal(row.Value, &st); err != nil {
			s.log.Warn("ignoring unreadable provider settings", "vendor", row.Key, "err", err)
			continue
		}
		all[row.Key] = st
	}
	keys, err := s.secrets.load(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	return all, saved, keys, nil
}

// Reload reads the configuration again from the store (and the keys from
// where they are kept): on a store several daemons share, a change made
// through another daemon applies here from then on. Providers whose
// configuration changed are rebuilt at their next Open.
func (s *Service) Reload(ctx context.Context) error {
	st, saved, keys, err := s.read(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if reflect.DeepEqual(st, s.stored) && saved == s.saved && maps.Equal(keys, s.keys) {
		return nil
	}
	if s.saved != saved && s.chosen == s.saved {
		s.chosen = saved // the default chosen through another daemon
	}
	s.stored, s.saved, s.keys = st, saved, keys
	clear(s.cache)
	s.gen++
	s.log.Info("provider configuration changed in the store", "default", s.defaultLocked())
	return nil
}

// env reads an environment variable, trimmed ("" = unset).
func (s *Service) env(name string) string {
	if name == "" {
		return ""
	}
	return strings.TrimSpace(s.opts.Getenv(name))
}

// resolve computes the effective configuration of v. Once the service is
// shared, s.mu must be held.
func (s *Service) resolve(v vendor) resolved {
	return s.resolveWith(v, s.stored[v.name], s.keys[v.name])
}

// resolveWith is resolve with the given stored settings and key.
func (s *Service) resolveWith(v vendor, st stored, key string) resolved {
	r := resolved{stored: st, apiKey: key}
	envURL := s.env(v.baseURLEnv)
	if envURL != "" && checkBaseURL(envURL) != nil {
		envURL = "" // not a URL: ignored, as if unset
	}
	explicitURL := r.BaseURL
	if explicitURL == "" {
		explicitURL = envURL
	}
	// The environment's key goes only where the environment (or the
	// vendor's default) points: a base URL configured through
	// provider.configure gets a configured key or none, so that a key for
	// one service never reaches another.
	if r.apiKey == "" && (r.BaseURL == "" || strings.TrimRight(r.BaseURL, "/") == strings.TrimRight(envURL, "/")) {
		r.apiKey = s.env(v.keyEnv)
	}
	r.baseURL = explicitURL
	if r.baseURL == "" {
		r.baseURL = v.defaultBaseURL
	}
	switch {
	case !v.real:
		r.configured = true
	case !compiledIn(v):
		// Left out of this build: never detected, never the default.
	case r.apiKey != "":
		r.configured = true
	case v.keyless && explicitURL != "":
		r.configured = true
	}
	return r
}

// clientConfig is the configuration of v's client for model ("" = the
// configured model, else the vendor's default).
func (s *Service) clientConfig(v vendor, model string) llm.EndpointConfig {
	s.mu.Lock()
	r := s.resolve(v)
	s.mu.Unlock()
	if model == "" {
		model = r.Model
	}
	retry := s.opts.Retry
	retry.Limiter = s.limiters[v.name]
	return llm.EndpointConfig{APIKey: r.apiKey, BaseURL: r.baseURL, Model: model, Models: r.Models,
		ContextWindow: r.ContextWindow, HTTPClient: s.opts.HTTPClient, Retry: retry, Log: s.log}
}

func mustVendor(name string) vendor {
	v, ok := lookupVendor(name)
	if !ok {
		panic("provider: unknown vendor " + name)
	}
	return v
}

// Prices returns the vendor's own prices by model (provider.configure
// {prices}): they replace the price table's for those models
// (pricing.Overlay). nil when it has none.
func (s *Service) Prices(vendor string) map[string]pricing.Price {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stored[vendor].Prices
}

// Default names the default vendor: the one chosen for this run (--provider,
// or provider.configure with default=true), else the one saved as default,
// else the first configured real vendor (openai, then anthropic), else fake.
// A choice whose vendor lost its configuration (its key was removed) is
// passed over.
func (s *Service) Default() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.defaultLocked()
}

func (s *Service) defaultLocked() string {
	for _, name := range []string{s.chosen, s.saved} {
		if v, ok := lookupVendor(name); ok && s.resolve(v).configured {
			return v.name
		}
	}
	for _, v := range vendors {
		if v.real && s.resolve(v).configured {
			return v.name
		}
	}
	return Fake
}

// Open returns the provider of vendor ("" = the default). Providers are
// built once and rebuilt after their vendor's configuration changes, so a
// session's next turn sees a new key or base URL.
func (s *Service) Open(name string) (llm.Provider, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if name == "" {
		name = s.defaultLocked()
	}
	v, ok := lookupVendor(name)
	if !ok {
		return nil, unknownVendor(name)
	}
	if p, ok := s.cache[name]; ok {
		return p, nil
	}
	if !compiledIn(v) {
		return nil, notInBuild(v)
	}
	if !s.resolve(v).configured {
		return nil, notConfigured(v)
	}
	spec := name
	if s.spec.Vendor == name {
		spec = s.spec.String()
	}
	// The factories lock s.mu themselves to read the configuration.
	gen := s.gen
	s.mu.Unlock()
	p, err := s.reg.Open(spec)
	s.mu.Lock()
	if err != nil {
		return nil, err
	}
	if cached, ok := s.cache[name]; ok {
		return cached, nil // another caller won the race
	}
	if gen == s.gen {
		s.cache[name] = p
	}
	return p, nil
}

// List describes every known vendor; it never returns a secret.
func (s *Service) List(ctx context.Context) ([]Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	def := s.defaultLocked()
	out := make([]Info, 0, len(vendors))
	for _, v := range vendors {
		r := s.resolve(v)
		info := Info{Vendor: v.name, Label: v.label, Configured: r.configured, Default: v.name == def,
			AuthMethods: slices.Clone(v.authMethods)}
		switch {
		case !v.real:
			info.DefaultModel, info.Models = fake.DefaultModel, []string{fake.DefaultModel}
		case !compiledIn(v):
			info.Label += fmt.Sprintf(" (not in this build: built with %s)", leftOutTags(v))
			info.DefaultModel, info.Models = r.Model, slices.Clone(r.Models)
			info.BaseURL = publicURL(r.baseURL)
		default:
			model := r.Model
			if s.spec.Vendor == v.name && s.spec.Arg != "" {
				model = s.spec.Arg
			}
			lister := clients[v.name](llm.EndpointConfig{BaseURL: r.baseURL, Model: model, Models: r.Models, HTTPClient: s.opts.HTTPClient})
			info.DefaultModel, info.Models = lister.DefaultModel(), lister.Models()
			info.BaseURL = publicURL(r.baseURL)
		}
		out = append(out, info)
	}
	return out, nil
}

// LoginWeb starts a web login. No vendor has one: API keys are configured
// with Configure or the environment.
func (s *Service) LoginWeb(ctx context.Context, name, method string) (string, error) {
	v, ok := lookupVendor(name)
	if !ok {
		return "", unknownVendor(name)
	}
	if !v.real {
		return "", &errs.Error{Code: errcode.LoginUnsupported, Err: ErrLoginUnsupported,
			Msg: "the fake provider needs no login"}
	}
	return "", &errs.Error{Code: errcode.LoginUnsupported, Err: ErrLoginUnsupported,
		Msg: fmt.Sprintf("%s has no web login: configure an API key with provider.configure {vendor: %q, config: {api_key: ...}} or set %s",
			v.name, v.name, v.keyEnv)}
}

func unknownVendor(name string) error {
	return &errs.Error{Code: errcode.NotFound, Err: ErrUnknownVendor,
		Msg: fmt.Sprintf("unknown provider %q: the vendors are %s (choose the model with the model parameter)",
			name, strings.Join(vendorNames(), ", "))}
}

func notConfigured(v vendor) error {
	how := fmt.Sprintf("set %s", v.keyEnv)
	if v.keyless {
		how = fmt.Sprintf("set %s (or %s for a local server)", v.keyEnv, v.baseURLEnv)
	}
	return &errs.Error{Code: errcode.InvalidParams, Err: ErrNotConfigured,
		Msg: fmt.Sprintf("provider %s is not configured: %s, or call provider.configure with an api_key", v.name, how)}
}

// publicURL drops what a base URL should not show: credentials, query and
// fragment.
func publicURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
