package tool

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// fakeMemory keeps notes in a slice and matches on substrings.
type fakeMemory struct {
	mu    sync.Mutex
	notes []store.Memory
	err   error
}

func (f *fakeMemory) Write(_ context.Context, text string, tags []string, ns string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return "", f.err
	}
	if ns == "" {
		ns = "default"
	}
	id := "m-" + strings.Repeat("0", len(f.notes)+1)
	f.notes = append(f.notes, store.Memory{ID: id, Text: text, Tags: tags, Namespace: ns})
	return id, nil
}

func (f *fakeMemory) Search(_ context.Context, q string, limit int, ns string) ([]store.MemoryHit, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var out []store.MemoryHit
	for _, n := range f.notes {
		if strings.Contains(n.Text, q) && (limit == 0 || len(out) < limit) {
			out = append(out, store.MemoryHit{Memory: n, Score: 1.5})
		}
	}
	return out, nil
}

func TestMemoryTools(t *testing.T) {
	mem := &fakeMemory{}
	reg, err := NewRegistry(NewMemoryWrite(mem), NewMemorySearch(mem))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := func(name, args string) (Result, error) {
		return reg.Run(ctx, name, Call{ID: "c1", Args: json.RawMessage(args), Workdir: t.TempDir()})
	}
	if tw, _ := reg.Lookup("memory_write"); tw.Tag() != approval.TagWrite {
		t.Errorf("memory_write tag %s, want write", tw.Tag())
	}
	if ts, _ := reg.Lookup("memory_search"); ts.Tag() != approval.TagRead {
		t.Errorf("memory_search tag %s, want read", ts.Tag())
	}

	res, err := run("memory_write", `{"text":"the staging host is db-2","tags":["infra"]}`)
	if err != nil || !res.OK || !strings.Contains(res.Output, "m-0") {
		t.Fatalf("memory_write = %+v, %v", res, err)
	}
	res, err = run("memory_search", `{"query":"staging","limit":5}`)
	if err != nil || !res.OK || !strings.Contains(res.Output, "the staging host is db-2") ||
		!strings.Contains(res.Output, "tags: infra") || !strings.Contains(res.Output, "1 notes") {
		t.Fatalf("memory_search = %+v, %v", res, err)
	}
	res, err = run("memory_search", `{"query":"nothing"}`)
	if err != nil || !res.OK || !strings.Contains(res.Output, "No notes match") {
		t.Fatalf("memory_search with no hit = %+v, %v", res, err)
	}

	// The schema rejects bad arguments before the tool runs.
	for _, tc := range []struct{ name, args string }{
		{"memory_write", `{}`},
		{"memory_write", `{"text":""}`},
		{"memory_write", `{"text":"x","tags":"a"}`},
		{"memory_search", `{"query":"x","limit":0}`},
		{"memory_search", `{"query":"x","other":1}`},
	} {
		if _, err := run(tc.name, tc.args); !errors.Is(err, ErrInvalidArgs) {
			t.Errorf("%s %s: error %v, want ErrInvalidArgs", tc.name, tc.args, err)
		}
	}
}

func TestMemoryToolErrors(t *testing.T) {
	ctx := context.Background()
	call := func(tl Tool, args string) (Result, error) {
		return tl.Run(ctx, Call{Args: json.RawMessage(args), Workdir: "/"})
	}
	refused := &fakeMemory{err: errs.New(errcode.InvalidParams, "namespace is bad")}
	for _, tl := range []Tool{NewMemoryWrite(refused), NewMemorySearch(refused)} {
		res, err := call(tl, `{"text":"x","query":"x"}`)
		if err != nil || res.OK || !strings.Contains(res.Error, "namespace is bad") {
			t.Errorf("%s with a refused request = %+v, %v; want a failed result", tl.Name(), res, err)
		}
	}
	broken := &fakeMemory{err: errors.New("disk on fire")}
	for _, tl := range []Tool{NewMemoryWrite(broken), NewMemorySearch(broken)} {
		if _, err := call(tl, `{"text":"x","query":"x"}`); err == nil {
			t.Errorf("%s with a broken store: no error", tl.Name())
		}
	}
}

func TestMemorySearchCapsOutput(t *testing.T) {
	mem := &fakeMemory{}
	ctx := context.Background()
	for range 40 {
		mem.Write(ctx, "big "+strings.Repeat("x", 3*maxHitChars), nil, "")
	}
	res, err := NewMemorySearch(mem).Run(ctx, Call{Args: json.RawMessage(`{"query":"big"}`), Workdir: "/"})
	if err != nil || !res.OK {
		t.Fatalf("%+v, %v", res, err)
	}
	if len(res.Output) > defaultOutputLimits.Model+2*maxHitChars+200 || !strings.Contains(res.Output, "more notes not shown") || !strings.Contains(res.Output, "[…]") {
		t.Fatalf("output of %d bytes not capped: %.200s…", len(res.Output), res.Output)
	}
}
