package provider_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/trellis-run/trellis/runtime/provider"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// TestConfigureUpdatesTheStoredValue, on each store: two services (two
// daemons) loaded the configuration before either changed it; one sets the
// base URL, then the other sets the model from its stale copy. The stored
// configuration keeps both: the change is applied to the stored value, not
// to a daemon's copy of it.
func TestConfigureUpdatesTheStoredValue(t *testing.T) {
	stores := map[string]func(t *testing.T) store.Store{
		"sqlite": func(t *testing.T) store.Store {
			st, err := sqlite.Open(filepath.Join(t.TempDir(), "t.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
		"postgres": func(t *testing.T) store.Store {
			st, err := postgres.Open(context.Background(), pgtest.FreshSchema(t, pgtest.Server(t)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			ctx := context.Background()
			newService := func() *provider.Service {
				s, err := provider.New(ctx, provider.Options{Home: t.TempDir(), Settings: st, Getenv: env{}.get})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			a, b := newService(), newService()
			if err := a.Configure(ctx, "openai", provider.Update{BaseURL: ptr("http://127.0.0.1:9/v1")}); err != nil {
				t.Fatal(err)
			}
			if err := b.Configure(ctx, "openai", provider.Update{Model: ptr("m-2"), Models: []string{"m-2"}}); err != nil {
				t.Fatal(err)
			}
			raw, err := st.GetSetting(ctx, "providers", "openai")
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(raw, &got); err != nil || got["base_url"] != "http://127.0.0.1:9/v1" || got["model"] != "m-2" {
				t.Fatalf("stored %s (%v): want the base URL set through a and the model set through b", raw, err)
			}
			if info := list(t, b)["openai"]; info.BaseURL != "http://127.0.0.1:9/v1" || info.DefaultModel != "m-2" {
				t.Fatalf("b lists %+v", info)
			}
		})
	}
}
