package memory_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/memory"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

func newService(t *testing.T) *memory.Service {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), sqlite.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return memory.NewService(st)
}

func TestWriteAndSearch(t *testing.T) {
	svc := newService(t)
	ctx := context.Background()
	write := func(text string, tags []string, ns string) string {
		t.Helper()
		id, err := svc.Write(ctx, text, tags, ns)
		if err != nil {
			t.Fatalf("Write(%q): %v", text, err)
		}
		if !strings.HasPrefix(id, "m-") {
			t.Fatalf("id %q, want an m- id", id)
		}
		return id
	}
	once := write("the build uses make", nil, "")
	twice := write("make make targets", []string{" ci ", "ci", "build"}, "")
	other := write("make in another namespace", nil, "work")

	hits, err := svc.Search(ctx, "make", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 2 || hits[0].ID != twice || hits[1].ID != once {
		t.Fatalf("default namespace hits = %+v, want %s then %s", hits, twice, once)
	}
	if hits[0].Namespace != memory.DefaultNamespace || !reflect.DeepEqual(hits[0].Tags, []string{"ci", "build"}) {
		t.Errorf("hit = %+v, want namespace default and tags [ci build]", hits[0])
	}
	hits, err = svc.Search(ctx, "make", 0, " work ")
	if err != nil || len(hits) != 1 || hits[0].ID != other {
		t.Fatalf("work namespace hits = %+v, %v; want %s", hits, err, other)
	}
	hits, err = svc.Search(ctx, "make", 1, "")
	if err != nil || len(hits) != 1 {
		t.Fatalf("limit 1: %d hits, %v", len(hits), err)
	}
}

func TestDefaultLimit(t *testing.T) {
	svc := newService(t)
	ctx := context.Background()
	for i := range memory.DefaultLimit + 3 {
		if _, err := svc.Write(ctx, fmt.Sprintf("note %d about cats", i), nil, ""); err != nil {
			t.Fatal(err)
		}
	}
	hits, err := svc.Search(ctx, "cats", 0, "")
	if err != nil || len(hits) != memory.DefaultLimit {
		t.Fatalf("%d hits, %v; want %d", len(hits), err, memory.DefaultLimit)
	}
}

func TestInvalid(t *testing.T) {
	svc := newService(t)
	ctx := context.Background()
	many := make([]string, memory.MaxTags+1)
	for i := range many {
		many[i] = fmt.Sprint("t", i)
	}
	tests := []struct {
		name string
		call func() error
	}{
		{"blank text", func() error { _, err := svc.Write(ctx, " \n", nil, ""); return err }},
		{"huge text", func() error {
			_, err := svc.Write(ctx, strings.Repeat("x", memory.MaxTextBytes+1), nil, "")
			return err
		}},
		{"NUL in text", func() error { _, err := svc.Write(ctx, "a\x00b", nil, ""); return err }},
		{"empty tag", func() error { _, err := svc.Write(ctx, "x", []string{"a", " "}, ""); return err }},
		{"too many tags", func() error { _, err := svc.Write(ctx, "x", many, ""); return err }},
		{"control in tag", func() error { _, err := svc.Write(ctx, "x", []string{"a\tb"}, ""); return err }},
		{"long namespace", func() error {
			_, err := svc.Write(ctx, "x", nil, strings.Repeat("n", memory.MaxNameBytes+1))
			return err
		}},
		{"blank query", func() error { _, err := svc.Search(ctx, "  ", 0, ""); return err }},
		{"negative limit", func() error { _, err := svc.Search(ctx, "x", -1, ""); return err }},
		{"limit too big", func() error { _, err := svc.Search(ctx, "x", memory.MaxLimit+1, ""); return err }},
		{"control in namespace", func() error { _, err := svc.Search(ctx, "x", 0, "a\nb"); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, memory.ErrInvalid) || errs.CodeOf(err) != errcode.InvalidParams {
				t.Fatalf("error %v (code %q), want invalid_params wrapping ErrInvalid", err, errs.CodeOf(err))
			}
		})
	}
}

// refusingStore fails every call with err.
type refusingStore struct{ err error }

func (s refusingStore) WriteMemory(context.Context, store.Memory) error { return s.err }
func (s refusingStore) SearchMemory(context.Context, string, int, string) ([]store.MemoryHit, error) {
	return nil, s.err
}
func (s refusingStore) ListMemory(context.Context, string, int) ([]store.Memory, error) {
	return nil, s.err
}
func (s refusingStore) DeleteMemory(context.Context, string) error { return s.err }

func TestStoreErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		err  error
		code string
	}{
		{"value refused", fmt.Errorf("x: %w", store.ErrInvalid), errcode.InvalidParams},
		{"broken", errors.New("disk on fire"), errcode.Internal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := memory.NewService(refusingStore{tc.err})
			_, werr := svc.Write(ctx, "x", nil, "")
			_, serr := svc.Search(ctx, "x", 0, "")
			for _, err := range []error{werr, serr} {
				if errs.CodeOf(err) != tc.code || !errors.Is(err, tc.err) {
					t.Errorf("error %v: code %q, want %q wrapping the store's error", err, errs.CodeOf(err), tc.code)
				}
			}
		})
	}
}
