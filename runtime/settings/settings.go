package settings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"

	"github.com/trellis-run/trellis/internal/broadcast"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/provider"
	"github.com/trellis-run/trellis/runtime/store"
)

// Where the sections other than "providers" are kept.
const (
	namespace = "settings"
	key       = "document"
)

// Mask replaces a secret's value in every answer.
const Mask = "***"

// MaxDocumentBytes bounds the stored sections.
const MaxDocumentBytes = 256 << 10

// secretNames are the field names whose values are credentials.
var secretNames = map[string]bool{"api_key": true, "token": true, "refresh_token": true, "password": true}

// Providers is the provider configuration the "providers" section shows
// and changes (provider.Service).
type Providers interface {
	List(ctx context.Context) ([]provider.Info, error)
	Configure(ctx context.Context, name string, u provider.Update) error
	Reload(ctx context.Context) error
}

// Change is one change of the document: the top-level sections that
// differ, sorted (settings.changed's keys).
type Change struct {
	Keys []string
}

// Watch is a stream of Changes (Service.Watch).
type Watch = broadcast.Watch[Change]

// Service reads and writes the document. It is safe for concurrent use.
type Service struct {
	st        store.SettingStore
	providers Providers
	watchers  broadcast.Hub[Change]

	mu   sync.Mutex
	held map[string]any // the document as this daemon last read it
}

// New returns the settings of st and providers.
func New(st store.SettingStore, providers Providers) *Service {
	return &Service{st: st, providers: providers}
}

// Get returns the document, secrets masked.
func (s *Service) Get(ctx context.Context) (map[string]any, error) {
	doc, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.held = doc
	s.mu.Unlock()
	return masked(doc).(map[string]any), nil
}

// Watch streams the changes that Set and Reload make from now on until ctx
// ends; a watcher that falls too far behind is ended with broadcast.ErrLagged.
// Only this daemon's calls are seen: another daemon of a cluster that
// changed the document shows in the next Reload here.
func (s *Service) Watch(ctx context.Context) *Watch { return s.watchers.Add(ctx) }

// Close ends every watch.
func (s *Service) Close() { s.watchers.Close() }

// publish tells the watchers of a change, when something changed.
func (s *Service) publish(keys []string) {
	if len(keys) > 0 {
		s.watchers.Publish(Change{Keys: keys})
	}
}

// Set deep-merges patch into the document (a null removes a field) and
// returns the result, secrets masked. The "providers" section goes to the
// provider configuration; a masked value ("***") sent back is ignored. The
// watchers are told of the sections that differ from the document before
// the call (none when the patch changed nothing).
func (s *Service) Set(ctx context.Context, patch map[string]any) (map[string]any, error) {
	before, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	if raw, ok := patch["providers"]; ok {
		if err := s.configure(ctx, raw); err != nil {
			return nil, err
		}
	}
	rest := map[string]any{}
	for k, v := range patch {
		if k != "providers" {
			rest[k] = v
		}
	}
	if err := checkNoSecrets(rest, ""); err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		if err := s.merge(ctx, rest); err != nil {
			return nil, err
		}
	}
	after, _, err := s.reread(ctx, before)
	if err != nil {
		return nil, err
	}
	return masked(after).(map[string]any), nil
}

// Reload reads the provider configuration and the document again from the
// store and reports the top-level sections that differ from what this
// daemon held.
func (s *Service) Reload(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	before := s.held
	s.mu.Unlock()
	if before == nil {
		var err error
		if before, err = s.read(ctx); err != nil { // what the daemon holds now
			return nil, err
		}
	}
	if err := s.providers.Reload(ctx); err != nil {
		return nil, err
	}
	_, changed, err := s.reread(ctx, before)
	if err != nil {
		return nil, err
	}
	return changed, nil
}

// reread reads the document again after a change, holds it as this
// daemon's, and tells the watchers of the top-level sections that differ
// from before; it returns the document and those sections.
func (s *Service) reread(ctx context.Context, before map[string]any) (map[string]any, []string, error) {
	after, err := s.read(ctx)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	s.held = after
	s.mu.Unlock()
	changed := changedKeys(before, after)
	s.publish(changed)
	return after, changed, nil
}

// changedKeys returns the top-level sections that differ, sorted.
func changedKeys(before, after map[string]any) []string {
	changed := []string{}
	for k := range union(before, after) {
		if !reflect.DeepEqual(before[k], after[k]) {
			changed = append(changed, k)
		}
	}
	sort.Strings(changed)
	return changed
}

// read builds the document: the stored sections and the providers.
func (s *Service) read(ctx context.Context) (map[string]any, error) {
	doc, err := s.stored(ctx)
	if err != nil {
		return nil, err
	}
	infos, err := s.providers.List(ctx)
	if err != nil {
		return nil, err
	}
	ps := map[string]any{}
	for _, i := range infos {
		p := map[string]any{"configured": i.Configured, "default": i.Default, "model": i.DefaultModel, "models": anySlice(i.Models)}
		if i.BaseURL != "" {
			p["base_url"] = i.BaseURL
		}
		ps[i.Vendor] = p
	}
	doc["providers"] = ps
	return doc, nil
}

func (s *Service) stored(ctx context.Context) (map[string]any, error) {
	raw, err := s.st.GetSetting(ctx, namespace, key)
	if errors.Is(err, store.ErrNotFound) {
		return map[string]any{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("settings: read the document: %w", err)
	}
	doc := map[string]any{}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("settings: the stored document is not a JSON object: %w", err)
	}
	return doc, nil
}

// merge applies patch to the stored sections: in one transaction on a
// store that updates atomically, so that daemons setting at once lose
// nothing.
func (s *Service) merge(ctx context.Context, patch map[string]any) error {
	apply := func(old json.RawMessage) (json.RawMessage, error) {
		doc := map[string]any{}
		if len(old) > 0 {
			if err := json.Unmarshal(old, &doc); err != nil {
				doc = map[string]any{} // unreadable: replaced
			}
		}
		mergeInto(doc, patch)
		b, err := json.Marshal(doc)
		if err != nil {
			return nil, err
		}
		if len(b) > MaxDocumentBytes {
			return nil, errs.New(errcode.InvalidParams, "the settings would be %d bytes, more than the %d they may hold", len(b), MaxDocumentBytes)
		}
		return b, nil
	}
	if up, ok := s.st.(store.SettingUpdater); ok {
		if ini, ok := s.st.(settingIniter); ok {
			// Created once, so that daemons setting the first time at
			// once both update the one row.
			if _, err := ini.InitSetting(ctx, namespace, key, json.RawMessage(`{}`)); err != nil {
				return fmt.Errorf("settings: create the document: %w", err)
			}
		}
		err := up.UpdateSetting(ctx, store.Unfenced(), namespace, key, apply)
		if !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	old, err := s.st.GetSetting(ctx, namespace, key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("settings: read the document: %w", err)
	}
	b, err := apply(old)
	if err != nil {
		return err
	}
	return s.st.PutSetting(ctx, store.Unfenced(), namespace, key, b)
}

// settingIniter is implemented by stores that insert a setting only when
// it is absent (PostgreSQL).
type settingIniter interface {
	InitSetting(ctx context.Context, namespace, key string, value json.RawMessage) (json.RawMessage, error)
}

// configure applies the "providers" section of a patch: one
// provider.configure per vendor named.
func (s *Service) configure(ctx context.Context, raw any) error {
	section, ok := raw.(map[string]any)
	if !ok {
		return errs.New(errcode.InvalidParams, "providers must be an object of vendors")
	}
	vendors := make([]string, 0, len(section))
	for v := range section {
		vendors = append(vendors, v)
	}
	sort.Strings(vendors)
	for _, v := range vendors {
		fields, ok := section[v].(map[string]any)
		if !ok {
			return errs.New(errcode.InvalidParams, "providers.%s must be an object", v)
		}
		u, err := update(v, fields)
		if err != nil {
			return err
		}
		if reflect.DeepEqual(u, provider.Update{}) {
			continue // nothing but masked or read-only values
		}
		if err := s.providers.Configure(ctx, v, u); err != nil {
			return err
		}
	}
	return nil
}

// update reads one vendor's fields; configured (read only) and masked
// values are skipped.
func update(vendor string, fields map[string]any) (provider.Update, error) {
	var u provider.Update
	bad := func(field, want string) error {
		return errs.New(errcode.InvalidParams, "providers.%s.%s must be %s", vendor, field, want)
	}
	for k, v := range fields {
		switch k {
		case "configured":
		case "api_key":
			sv, ok := v.(string)
			if !ok && v != nil {
				return u, bad(k, "a string")
			}
			if sv != Mask {
				u.APIKey = &sv
			}
		case "base_url", "model":
			sv, ok := v.(string)
			if !ok {
				return u, bad(k, "a string")
			}
			if k == "base_url" {
				u.BaseURL = &sv
			} else {
				u.Model = &sv
			}
		case "models":
			list, ok := v.([]any)
			if !ok {
				return u, bad(k, "a list of model names")
			}
			models := []string{}
			for _, m := range list {
				ms, ok := m.(string)
				if !ok {
					return u, bad(k, "a list of model names")
				}
				models = append(models, ms)
			}
			u.Models = models
		case "default":
			b, ok := v.(bool)
			if !ok {
				return u, bad(k, "true or false")
			}
			u.Default = &b
		case "context_window":
			n, ok := v.(float64)
			if !ok || n != float64(int(n)) {
				return u, bad(k, "a whole number of tokens")
			}
			w := int(n)
			u.ContextWindow = &w
		default:
			return u, errs.New(errcode.InvalidParams, "providers.%s.%s is not a provider setting: api_key, base_url, model, models, default, context_window", vendor, k)
		}
	}
	return u, nil
}

// checkNoSecrets refuses credentials outside the provider configuration.
func checkNoSecrets(v any, path string) error {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if secretNames[k] && e != nil {
				return errs.New(errcode.InvalidParams, "%s looks like a credential: Trellis keeps credentials only in the provider configuration (providers.VENDOR.api_key) and its secrets, never in the settings", p)
			}
			if err := checkNoSecrets(e, p); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := checkNoSecrets(e, path); err != nil {
				return err
			}
		}
	}
	return nil
}

// mergeInto deep-merges patch into doc: objects merge, null removes,
// anything else replaces.
func mergeInto(doc, patch map[string]any) {
	for k, v := range patch {
		switch pv := v.(type) {
		case nil:
			delete(doc, k)
		case map[string]any:
			old, ok := doc[k].(map[string]any)
			if !ok {
				old = map[string]any{}
			}
			mergeInto(old, pv)
			doc[k] = old
		default:
			doc[k] = v
		}
	}
}

// masked returns a copy of v with every secret-named field's value Mask.
func masked(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if secretNames[k] && e != nil {
				out[k] = Mask
				continue
			}
			out[k] = masked(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = masked(e)
		}
		return out
	}
	return v
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func union(a, b map[string]any) map[string]bool {
	out := map[string]bool{}
	for _, k := range slices.Concat(keys(a), keys(b)) {
		out[k] = true
	}
	return out
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
