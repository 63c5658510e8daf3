package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/pricing"
	"github.com/trellis-run/trellis/runtime/store"
)

// Update is a change to a vendor's configuration (provider.configure). Nil
// fields are left as they are; an empty APIKey or BaseURL removes the stored
// value (the environment applies again).
type Update struct {
	APIKey  *string
	BaseURL *string
	Model   *string
	Models  []string // nil = unchanged
	// ContextWindow sets the window used for the vendor's models; 0 clears it.
	ContextWindow *int
	// Default true makes the vendor the default (persisted); false, on the
	// current default, returns to automatic choice.
	Default *bool
	// Prices replaces the vendor's own prices by model (pricing.Entries
	// reads them); empty and not nil clears them. nil = unchanged.
	Prices map[string]pricing.Price
}

func (u Update) empty() bool {
	return u.APIKey == nil && u.BaseURL == nil && u.Model == nil && u.Models == nil && u.Default == nil && u.ContextWindow == nil && u.Prices == nil
}

// fields names the fields an update sets, for logs (never their values).
func (u Update) fields() []string {
	var f []string
	for _, field := range []struct {
		name string
		set  bool
	}{{"api_key", u.APIKey != nil}, {"base_url", u.BaseURL != nil}, {"model", u.Model != nil},
		{"models", u.Models != nil}, {"default", u.Default != nil}, {"context_window", u.ContextWindow != nil}, {"prices", u.Prices != nil}} {
		if field.set {
			f = append(f, field.name)
		}
	}
	return f
}

// Configure validates u, reporting every problem at once, then stores it:
// the key in the vendor's secret file, the rest in the settings table.
func (s *Service) Configure(ctx context.Context, name string, u Update) error {
	v, ok := lookupVendor(name)
	if !ok {
		return unknownVendor(name)
	}
	if !compiledIn(v) {
		return notInBuild(v)
	}
	if u.empty() {
		return &errs.Error{Code: errcode.InvalidParams, Err: ErrEmptyConfig,
			Msg: "config is empty: set at least one of api_key, base_url, model, models, default, context_window, prices, clear_prices"}
	}
	u = normalize(u)
	if problems := validate(v, u); len(problems) > 0 {
		return &errs.Error{Code: errcode.InvalidParams, Err: ErrInvalidConfig,
			Msg: fmt.Sprintf("provider %s: %s", v.name, strings.Join(problems, "; "))}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.stored[v.name]
	u.apply(&next)
	if u.Default != nil && *u.Default {
		// The vendor must work once this update is applied.
		key := s.keys[v.name]
		if u.APIKey != nil {
			key = *u.APIKey
		}
		if !s.resolveWith(v, next, key).configured {
			return &errs.Error{Code: errcode.InvalidParams, Err: ErrNotConfigured,
				Msg: fmt.Sprintf("provider %s cannot be the default before it is configured: give an api_key too", v.name)}
		}
	}

	if u.APIKey != nil {
		if err := s.secrets.store(ctx, v.name, *u.APIKey); err != nil {
			var e *errs.Error
			if errors.As(err, &e) {
				return err
			}
			return fmt.Errorf("store the %s API key: %w", v.name, err)
		}
		if *u.APIKey == "" {
			delete(s.keys, v.name)
		} else {
			s.keys[v.name] = *u.APIKey
		}
	}
	if v.real && (u.BaseURL != nil || u.Model != nil || u.Models != nil || u.ContextWindow != nil || u.Prices != nil) {
		saved, err := s.saveStored(ctx, v.name, u)
		if err != nil {
			return fmt.Errorf("save the %s settings: %w", v.name, err)
		}
		s.stored[v.name] = saved
	}
	if u.Default != nil {
		if err := s.setDefault(ctx, v.name, *u.Default); err != nil {
			return err
		}
	}
	delete(s.cache, v.name)
	s.gen++
	s.log.Info("provider configured", "vendor", v.name, "fields", u.fields(), "default", s.defaultLocked())
	return nil
}

// settingIniter is implemented by stores that insert a setting only when it
// is absent (PostgreSQL), so that daemons creating it at once keep one.
type settingIniter interface {
	InitSetting(ctx context.Context, namespace, key string, value json.RawMessage) (json.RawMessage, error)
}

// apply sets u's non-secret fields on st.
func (u Update) apply(st *stored) {
	if u.BaseURL != nil {
		st.BaseURL = *u.BaseURL
	}
	if u.Model != nil {
		st.Model = *u.Model
	}
	if u.Models != nil {
		st.Models = u.Models
	}
	if u.ContextWindow != nil {
		st.ContextWindow = *u.ContextWindow
	}
	if u.Prices != nil {
		st.Prices = u.Prices
		if len(u.Prices) == 0 {
			st.Prices = nil
		}
	}
}

// saveStored applies u's non-secret fields to the vendor's stored settings
// and returns the result. On a store that updates atomically
// (store.SettingUpdater) the change is applied to the stored value in one
// transaction holding its row, never to this daemon's copy, so that daemons
// configuring one vendor at once lose none of each other's fields; s.mu is
// held.
func (s *Service) saveStored(ctx context.Context, vendor string, u Update) (stored, error) {
	up, ok := s.opts.Settings.(store.SettingUpdater)
	if ok {
		if ini, ok := s.opts.Settings.(settingIniter); ok {
			if _, err := ini.InitSetting(ctx, settingsNamespace, vendor, json.RawMessage(`{}`)); err != nil {
				return stored{}, err
			}
		}
		var next stored
		err := up.UpdateSetting(ctx, store.Unfenced(), settingsNamespace, vendor, func(old json.RawMessage) (json.RawMessage, error) {
			next = stored{}
			if err := json.Unmarshal(old, &next); err != nil {
				next = stored{} // unreadable: replaced
			}
			u.apply(&next)
			return json.Marshal(next)
		})
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return stored{}, err
		}
		// Absent on a store with no insert-if-absent: one daemon (SQLite).
	}
	next := s.stored[vendor]
	u.apply(&next)
	data, _ := json.Marshal(next)
	if err := s.opts.Settings.PutSetting(ctx, store.Unfenced(), settingsNamespace, vendor, data); err != nil {
		return stored{}, err
	}
	return next, nil
}

// setDefault records the default choice; s.mu is held.
func (s *Service) setDefault(ctx context.Context, name string, on bool) error {
	switch {
	case on:
		data, _ := json.Marshal(name)
		if err := s.opts.Settings.PutSetting(ctx, store.Unfenced(), settingsNamespace, defaultKey, data); err != nil {
			return fmt.Errorf("save the default provider: %w", err)
		}
		s.chosen, s.saved = name, name
	case s.defaultLocked() == name:
		if s.saved != "" {
			if err := s.opts.Settings.DeleteSetting(ctx, store.Unfenced(), settingsNamespace, defaultKey); err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("clear the default provider: %w", err)
			}
		}
		s.chosen, s.saved = "", ""
	}
	return nil
}

// normalize trims the text fields and drops empty model names.
func normalize(u Update) Update {
	trim := func(p *string) *string {
		if p == nil {
			return nil
		}
		t := strings.TrimSpace(*p)
		return &t
	}
	u.APIKey, u.BaseURL, u.Model = trim(u.APIKey), trim(u.BaseURL), trim(u.Model)
	if u.BaseURL != nil {
		t := strings.TrimRight(*u.BaseURL, "/")
		u.BaseURL = &t
	}
	if u.Models != nil {
		models := []string{}
		for _, m := range u.Models {
			if m = strings.TrimSpace(m); m != "" {
				models = append(models, m)
			}
		}
		u.Models = models
	}
	return u
}

// validate lists every problem of u for v.
func validate(v vendor, u Update) []string {
	var problems []string
	if !v.real {
		for _, f := range []struct {
			name string
			set  bool
		}{{"api_key", u.APIKey != nil}, {"base_url", u.BaseURL != nil}, {"model", u.Model != nil}, {"models", u.Models != nil}, {"context_window", u.ContextWindow != nil}, {"prices", u.Prices != nil}} {
			if f.set {
				problems = append(problems, fmt.Sprintf("%s is not accepted: the fake provider plays scripts (--provider fake:PATH) and takes only default", f.name))
			}
		}
		return problems
	}
	if u.APIKey != nil && strings.IndexFunc(*u.APIKey, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		problems = append(problems, "api_key must not contain spaces or control characters")
	}
	if u.BaseURL != nil && *u.BaseURL != "" {
		if err := checkBaseURL(*u.BaseURL); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if u.ContextWindow != nil && (*u.ContextWindow < 0 || *u.ContextWindow > 100_000_000) {
		problems = append(problems, fmt.Sprintf("context_window %d: want 0 (the known value) to 100000000 tokens", *u.ContextWindow))
	}
	if u.Model != nil && !validModel(*u.Model) {
		problems = append(problems, fmt.Sprintf("model %q: want a model name without spaces, at most 200 characters", *u.Model))
	}
	for _, m := range u.Models {
		if !validModel(m) {
			problems = append(problems, fmt.Sprintf("models: %q is not a model name", m))
		}
	}
	return problems
}

func validModel(m string) bool {
	return len(m) <= 200 && strings.IndexFunc(m, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) < 0
}

// checkBaseURL accepts an absolute http(s) URL without credentials, query
// or fragment.
func checkBaseURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("base_url is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("base_url %q: want an http:// or https:// URL, e.g. http://localhost:11434/v1", publicURL(raw))
	case u.Host == "":
		return fmt.Errorf("base_url %q: the host is missing", publicURL(raw))
	case u.User != nil:
		return fmt.Errorf("base_url must not carry credentials: give the key as api_key")
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("base_url %q: must not have a query or fragment", publicURL(raw))
	}
	return nil
}
