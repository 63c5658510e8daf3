package settings

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/provider"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// fakeProviders records the updates; List shows one vendor.
type fakeProviders struct {
	model   string
	updates map[string]provider.Update
}

func (f *fakeProviders) List(context.Context) ([]provider.Info, error) {
	return []provider.Info{{Vendor: "openai", DefaultModel: f.model, Models: []string{f.model}, Configured: true}}, nil
}

func (f *fakeProviders) Configure(_ context.Context, name string, u provider.Update) error {
	if name != "openai" {
		return errs.New(errcode.NotFound, "unknown provider %q", name)
	}
	f.updates[name] = u
	if u.Model != nil {
		f.model = *u.Model
	}
	return nil
}

func (f *fakeProviders) Reload(context.Context) error { return nil }

func TestDocument(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	ps := &fakeProviders{model: "m1", updates: map[string]provider.Update{}}
	s := New(st, ps)

	doc, err := s.Set(ctx, map[string]any{"ui": map[string]any{"theme": "dark", "size": 1.0}, "list": []any{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(doc["ui"], map[string]any{"theme": "dark", "size": 1.0}) || doc["providers"] == nil {
		t.Fatalf("doc %v", doc)
	}
	doc, err = s.Set(ctx, map[string]any{"ui": map[string]any{"theme": nil}})
	if err != nil || !reflect.DeepEqual(doc["ui"], map[string]any{"size": 1.0}) || !reflect.DeepEqual(doc["list"], []any{"a"}) {
		t.Fatalf("after removing ui.theme: %v %v", doc, err)
	}

	// The providers section configures; a masked key sent back is not a key.
	if _, err := s.Set(ctx, map[string]any{"providers": map[string]any{"openai": map[string]any{"api_key": Mask, "model": "m2", "configured": true}}}); err != nil {
		t.Fatal(err)
	}
	if u := ps.updates["openai"]; u.APIKey != nil || u.Model == nil || *u.Model != "m2" {
		t.Fatalf("update %+v", u)
	}
	for _, tc := range []struct {
		patch map[string]any
		code  string
		inMsg string
	}{
		{map[string]any{"x": map[string]any{"deep": []any{map[string]any{"password": "p"}}}}, errcode.InvalidParams, "x.deep.password"},
		{map[string]any{"providers": map[string]any{"openai": map[string]any{"colour": "red"}}}, errcode.InvalidParams, "colour"},
		{map[string]any{"providers": map[string]any{"openai": map[string]any{"models": "m"}}}, errcode.InvalidParams, "models"},
		{map[string]any{"providers": map[string]any{"gemini": map[string]any{"model": "m"}}}, errcode.NotFound, "gemini"},
	} {
		if _, err := s.Set(ctx, tc.patch); errs.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.inMsg) {
			t.Errorf("Set(%v): %v, want %s naming %q", tc.patch, err, tc.code, tc.inMsg)
		}
	}

	// What changed behind the daemon's back is what Reload reports.
	if changed, err := s.Reload(ctx); err != nil || len(changed) != 0 {
		t.Fatalf("reload with nothing changed: %v %v", changed, err)
	}
	ps.model = "m3"
	if err := st.PutSetting(ctx, store.Unfenced(), namespace, key, []byte(`{"ui":{"size":2}}`)); err != nil {
		t.Fatal(err)
	}
	if changed, err := s.Reload(ctx); err != nil || strings.Join(changed, ",") != "list,providers,ui" {
		t.Fatalf("reload: %v %v", changed, err)
	}
}

func TestMasked(t *testing.T) {
	in := map[string]any{"a": map[string]any{"token": "t", "password": nil, "x": []any{map[string]any{"api_key": "k"}}}}
	want := map[string]any{"a": map[string]any{"token": Mask, "password": nil, "x": []any{map[string]any{"api_key": Mask}}}}
	if got := masked(in); !reflect.DeepEqual(got, want) {
		t.Fatalf("masked = %v", got)
	}
	if in["a"].(map[string]any)["token"] != "t" {
		t.Fatal("masked changed its input")
	}
}

// TestSharedStore: daemons sharing a PostgreSQL store see one document, and
// sections set at once through each are all kept.
func TestSharedStore(t *testing.T) {
	ctx := context.Background()
	st, err := postgres.Open(ctx, pgtest.FreshSchema(t, pgtest.Server(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const daemons = 8
	var wg sync.WaitGroup
	errc := make(chan error, daemons)
	for i := range daemons {
		s := New(st, &fakeProviders{model: "m", updates: map[string]provider.Update{}})
		wg.Go(func() {
			_, err := s.Set(ctx, map[string]any{"daemons": map[string]any{fmt.Sprint(i): true}})
			errc <- err
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	doc, err := New(st, &fakeProviders{model: "m"}).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := doc["daemons"].(map[string]any); len(got) != daemons {
		t.Fatalf("daemons section %v, want all %d", got, daemons)
	}
}

// TestWatch: each Set or Reload that changed a section tells the watchers
// which, sorted; one that changed nothing tells them nothing.
func TestWatch(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	ps := &fakeProviders{model: "m1", updates: map[string]provider.Update{}}
	s := New(st, ps)
	w := s.Watch(ctx)
	model := "m2"
	steps := []struct {
		name string
		do   func() error
		want []string // nil: no change is published
	}{
		{"set two sections", func() error {
			_, err := s.Set(ctx, map[string]any{"ui": map[string]any{"theme": "dark"}, "editor": map[string]any{"tabs": 2.0}})
			return err
		}, []string{"editor", "ui"}},
		{"set the same again", func() error {
			_, err := s.Set(ctx, map[string]any{"ui": map[string]any{"theme": "dark"}})
			return err
		}, nil},
		{"set a provider's model", func() error {
			_, err := s.Set(ctx, map[string]any{"providers": map[string]any{"openai": map[string]any{"model": "m3"}}})
			return err
		}, []string{"providers"}},
		{"changed behind the document's back, then reloaded", func() error {
			ps.model = model
			_, err := s.Reload(ctx)
			return err
		}, []string{"providers"}},
		{"reloaded with nothing new", func() error { _, err := s.Reload(ctx); return err }, nil},
		{"remove a section", func() error {
			_, err := s.Set(ctx, map[string]any{"editor": nil})
			return err
		}, []string{"editor"}},
	}
	var want [][]string
	for _, step := range steps {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if step.want != nil {
			want = append(want, step.want)
		}
	}
	s.Close()
	var got [][]string
	for c := range w.Events() {
		got = append(got, c.Keys)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("published %q, want %q", got, want)
	}
}
