package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/store"
)

// ModelPin is the provider and model a session's turns use.
type ModelPin struct {
	Provider string
	Model    string
	// Pinned is false when the pin was cleared: the daemon's default
	// provider and model apply.
	Pinned bool
}

// SetModelPin points the session's next turns at spec: a model id of the
// session's provider, "vendor:model", a bare vendor (its default model),
// or "" / "inherit" to go back to the daemon's default provider and its
// default model (the agent definition's model when the session has one).
// A vendor this daemon cannot open (not configured, not in the build) is
// its error; an unknown one makes spec a model id.
func (s *Service) SetModelPin(ctx context.Context, id, spec string) (ModelPin, error) {
	l, err := s.load(ctx, id)
	if err != nil {
		return ModelPin{}, err
	}
	l.mu.Lock()
	row := l.row
	l.mu.Unlock()
	pin := ModelPin{Provider: row.Provider, Model: spec, Pinned: true}
	switch vendor, model, _ := strings.Cut(spec, ":"); {
	case spec == "" || spec == "inherit":
		pin = ModelPin{Provider: s.deps.Providers.Default()}
		if row.Agent != "" && s.agents != nil {
			if def, err := s.agents(row.Agent); err == nil {
				pin.Model = def.Model
			}
		}
		if pin.Model == "" {
			if pin.Model, err = s.defaultModelOf(pin.Provider); err != nil {
				return ModelPin{}, err
			}
		}
	case model != "" && s.isVendor(vendor):
		if _, err := s.deps.Providers.Open(vendor); err != nil {
			return ModelPin{}, err
		}
		pin.Provider, pin.Model = vendor, model
	case !strings.Contains(spec, ":") && s.isVendor(spec):
		if pin.Model, err = s.defaultModelOf(spec); err != nil {
			return ModelPin{}, err
		}
		pin.Provider = spec
	}
	if err := s.deps.Store.UpdateSession(ctx, s.writer(id), id, store.SessionUpdate{Provider: &pin.Provider, Model: &pin.Model}); err != nil {
		return ModelPin{}, fmt.Errorf("save model: %w", s.refused(ctx, id, err))
	}
	l.mu.Lock()
	l.row.Provider, l.row.Model = pin.Provider, pin.Model
	l.mu.Unlock()
	if err := s.modelChanged(ctx, id, pin.Provider, pin.Model, s.effortOf(ctx, id)); err != nil {
		return ModelPin{}, err
	}
	return pin, nil
}

// effortOf is the session's pinned effort ("" = none).
func (s *Service) effortOf(ctx context.Context, id string) string {
	effort := ""
	if raw, err := s.deps.Store.GetSetting(ctx, effortNamespace, id); err == nil {
		_ = json.Unmarshal(raw, &effort)
	}
	return effort
}

// modelChanged emits model.changed: the model and effort the session's
// next turn uses.
func (s *Service) modelChanged(ctx context.Context, id, provider, model, effort string) error {
	ev := events.ModelChangedEvent{EffortSource: "default", Principal: actorOf(ctx)}
	if provider != "" {
		ev.Provider = &provider
	}
	if model != "" {
		ev.Model = &model
	}
	if effort != "" {
		ev.Effort, ev.EffortSource = &effort, "session"
	}
	_, err := s.deps.Events.Append(ctx, id, eventkind.ModelChanged, ev)
	return err
}

// isVendor reports whether name is a provider vendor this daemon knows
// (configured or not).
func (s *Service) isVendor(name string) bool {
	_, err := s.deps.Providers.Open(name)
	return !errors.Is(err, llm.ErrUnknownVendor) && !errs.Is(err, errcode.NotFound)
}

// defaultModelOf opens vendor and returns its default model.
func (s *Service) defaultModelOf(vendor string) (string, error) {
	prov, err := s.deps.Providers.Open(vendor)
	if err != nil {
		return "", err
	}
	return defaultModel(prov), nil
}

// EffortNames are the reasoning efforts a session may pin, weakest first.
func EffortNames() []string {
	return []string{"minimal", "low", "medium", "high", "max"}
}

// SetEffort pins the reasoning effort of the session's model calls, or
// clears the pin ("": the provider's default). It returns the pin now in
// force.
func (s *Service) SetEffort(ctx context.Context, id, effort string) (string, error) {
	if !efforts[effort] {
		return "", errs.New(errcode.InvalidParams, "effort %q is not one of %s", effort, strings.Join(EffortNames(), ", "))
	}
	l, err := s.load(ctx, id)
	if err != nil {
		return "", err
	}
	if effort == "" {
		if err := s.deps.Store.DeleteSetting(ctx, store.Unfenced(), effortNamespace, id); err != nil && !errors.Is(err, store.ErrNotFound) {
			return "", fmt.Errorf("clear session effort: %w", err)
		}
	} else {
		raw, _ := json.Marshal(effort)
		if err := s.deps.Store.PutSetting(ctx, store.Unfenced(), effortNamespace, id, raw); err != nil {
			return "", fmt.Errorf("save session effort: %w", err)
		}
	}
	l.mu.Lock()
	provider, model := l.row.Provider, l.row.Model
	l.mu.Unlock()
	if err := s.modelChanged(ctx, id, provider, model, effort); err != nil {
		return "", err
	}
	return effort, nil
}

// maxTitleRunes bounds a title set by Rename.
const maxTitleRunes = 200

// Rename sets the session's title; "" clears it (the next prompt names
// the session again).
func (s *Service) Rename(ctx context.Context, id, title string) error {
	title = strings.TrimSpace(title)
	if n := utf8.RuneCountInString(title); n > maxTitleRunes {
		return errs.New(errcode.InvalidParams, "title is %d characters long; at most %d", n, maxTitleRunes)
	}
	l, err := s.load(ctx, id)
	if err != nil {
		return err
	}
	if err := s.deps.Store.UpdateSession(ctx, s.writer(id), id, store.SessionUpdate{Title: &title}); err != nil {
		return fmt.Errorf("save title: %w", s.refused(ctx, id, err))
	}
	l.mu.Lock()
	l.row.Title = title
	l.mu.Unlock()
	return nil
}
