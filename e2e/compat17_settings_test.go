package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// nextSettingsChanged reads c's notifications until a settings.changed
// arrives (others are skipped), failing after a minute.
func nextSettingsChanged(t *testing.T, c *wsClient, who string) (keys []string, scope string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case f := <-c.notes:
			if f.Method != "settings.changed" {
				continue
			}
			var p struct {
				Keys  []string `json:"keys"`
				Scope string   `json:"scope"`
			}
			if err := json.Unmarshal(f.Params, &p); err != nil {
				t.Fatalf("%s: settings.changed params %s: %v", who, f.Params, err)
			}
			return p.Keys, p.Scope
		case <-deadline:
			t.Fatalf("%s: no settings.changed within 60 s", who)
		}
	}
}

// TestCompat17SettingsChanged: snowpea 1.7's settings.changed {keys,
// scope} reaches every connection after a settings.set or a
// system.reloadSettings that changed a section, and a call that changed
// nothing sends none (the next notification a connection gets is the next
// real change's).
func TestCompat17SettingsChanged(t *testing.T) {
	d := startCompatDaemon(t)
	a, b := compatHello(t, d), compatHello(t, d)
	ctx := context.Background()
	call := func(c *wsClient, method string, params map[string]any) {
		t.Helper()
		if err := c.Call(ctx, method, params, nil); err != nil {
			t.Fatalf("%s %v: %v", method, params, err)
		}
	}
	set := func(patch map[string]any) { t.Helper(); call(a, "settings.set", map[string]any{"patch": patch}) }
	both := func(what string, want ...string) {
		t.Helper()
		for _, c := range []struct {
			who string
			ws  *wsClient
		}{{"the caller", a}, {"the other connection", b}} {
			keys, scope := nextSettingsChanged(t, c.ws, c.who+" after "+what)
			if !slices.Equal(keys, want) || scope != "global" {
				t.Fatalf("%s after %s: settings.changed {keys: %q, scope: %q}, want {keys: %q, scope: \"global\"}", c.who, what, keys, scope, want)
			}
		}
	}

	set(map[string]any{"ui": map[string]any{"theme": "dark"}})
	both("settings.set of ui", "ui")

	// The same patch again changes nothing: no notification, so the next
	// one is the editor section's.
	set(map[string]any{"ui": map[string]any{"theme": "dark"}})
	set(map[string]any{"editor": map[string]any{"tabs": 2}, "ui": map[string]any{"theme": "dark"}})
	both("a no-op settings.set, then one changing editor", "editor")

	// Changed behind the settings document's back (as another daemon of a
	// cluster would): system.reloadSettings finds it and says so.
	call(b, "provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{"model": "model-a"}})
	var reload struct {
		Reloaded    bool     `json:"reloaded"`
		ChangedKeys []string `json:"changedKeys"`
	}
	if err := b.Call(ctx, "system.reloadSettings", map[string]any{}, &reload); err != nil || !reload.Reloaded {
		t.Fatalf("system.reloadSettings: %+v %v, want reloaded", reload, err)
	}
	both("system.reloadSettings", "providers")

	// A reload that finds nothing new sends none either.
	call(b, "system.reloadSettings", map[string]any{})
	set(map[string]any{"ui": nil})
	both("a no-op reload, then removing ui", "ui")
}
