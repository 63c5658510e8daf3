package agents_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/agents"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// memShared is the settings table a cluster shares, in memory.
type memShared struct {
	mu   sync.Mutex
	rows map[string]json.RawMessage // namespace + "\x00" + key
}

func (m *memShared) InitSetting(_ context.Context, ns, key string, v json.RawMessage) (json.RawMessage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.rows[ns+"\x00"+key]; ok {
		return old, nil
	}
	m.rows[ns+"\x00"+key] = v
	return v, nil
}

func (m *memShared) GetSetting(_ context.Context, ns, key string) (json.RawMessage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.rows[ns+"\x00"+key]
	if !ok {
		return nil, store.ErrNotFound
	}
	return v, nil
}

func (m *memShared) ListSettings(_ context.Context, ns string) ([]store.Setting, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Setting
	for k, v := range m.rows {
		if n, key, _ := strings.Cut(k, "\x00"); n == ns {
			out = append(out, store.Setting{Namespace: ns, Key: key, Value: v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (m *memShared) DeleteSetting(_ context.Context, _ store.Writer, ns, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.rows[ns+"\x00"+key]; !ok {
		return store.ErrNotFound
	}
	delete(m.rows, ns+"\x00"+key)
	return nil
}

// TestSharedDefinitions: two daemons' definitions on one shared table.
// What one creates the other reads, with a copy in its own directory; a
// file put there by hand is neither read nor touched; a delete removes the
// copies as each daemon notices it.
func TestSharedDefinitions(t *testing.T) {
	shared := &memShared{rows: map[string]json.RawMessage{}}
	dirA, dirB := filepath.Join(t.TempDir(), "agents"), filepath.Join(t.TempDir(), "agents")
	a, b := agents.NewSharedDefinitions(dirA, shared), agents.NewSharedDefinitions(dirB, shared)

	// A hand-written file in B's directory.
	if err := os.MkdirAll(dirB, 0o755); err != nil {
		t.Fatal(err)
	}
	hand := filepath.Join(dirB, "local.md")
	os.WriteFile(hand, []byte("---\nname: local\ndescription: by hand\n---\nHi.\n"), 0o644)

	in := agents.Definition{Name: "reviewer", Description: "Reviews diffs", Instructions: "Review.", Tools: []string{"grep"}}
	made, err := a.Create(in)
	if err != nil || made.Path != filepath.Join(dirA, "reviewer.md") {
		t.Fatalf("create: %+v %v", made, err)
	}
	if _, err := b.Create(agents.Definition{Name: "reviewer", Description: "again"}); !errors.Is(err, agents.ErrExists) || errs.CodeOf(err) != errcode.InvalidParams {
		t.Fatalf("create of a name the other daemon made: %v, want ErrExists", err)
	}
	if name, err := b.FreeName("Reviewer"); err != nil || name != "reviewer-2" {
		t.Fatalf("free name: %q %v", name, err)
	}
	got, err := b.Get("reviewer")
	if err != nil || got.Instructions != "Review." || got.Description != "Reviews diffs" || got.Path != filepath.Join(dirB, "reviewer.md") {
		t.Fatalf("get on B: %+v %v", got, err)
	}
	copyB, err := os.ReadFile(got.Path)
	if err != nil || !strings.Contains(string(copyB), "Review.") || !strings.Contains(string(copyB), "# trellis: a copy") {
		t.Fatalf("B's copy: %q %v", copyB, err)
	}
	list, err := b.List()
	if err != nil || len(list) != 1 || list[0].Name != "reviewer" {
		t.Fatalf("list on B: %+v %v (the hand-written file is not a definition here)", list, err)
	}
	if _, err := b.Get("local"); errs.CodeOf(err) != errcode.NotFound {
		t.Fatalf("get of the hand-written file: %v, want not_found", err)
	}

	// A deletes it: B's list drops its copy, the hand-written file stays.
	if err := a.Delete("reviewer"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(made.Path); !os.IsNotExist(err) {
		t.Fatalf("A's copy after its delete: %v", err)
	}
	if list, err := b.List(); err != nil || len(list) != 0 {
		t.Fatalf("list on B after A's delete: %+v %v", list, err)
	}
	if _, err := os.Stat(filepath.Join(dirB, "reviewer.md")); !os.IsNotExist(err) {
		t.Fatalf("B's copy after A's delete: %v", err)
	}
	if _, err := os.Stat(hand); err != nil {
		t.Fatalf("the hand-written file: %v", err)
	}
	if err := b.Delete("reviewer"); !errors.Is(err, agents.ErrNotFound) || errs.CodeOf(err) != errcode.NotFound {
		t.Fatalf("second delete: %v", err)
	}

	// Many creates of one name at once: one wins.
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 16 {
		defs := a
		if i%2 == 1 {
			defs = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := defs.Create(agents.Definition{Name: "twin", Description: "d"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case !errors.Is(err, agents.ErrExists):
				t.Errorf("create: %v", err)
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d of 16 creates of one name succeeded, want 1", won)
	}
}
