package conformance

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/trellis-run/trellis/runtime/store"
)

func note(id, namespace, text string, created int, tags ...string) store.Memory {
	return store.Memory{ID: id, Namespace: namespace, Text: text, Tags: tags, CreatedAt: at(created)}
}

func writeNotes(t *testing.T, st store.Store, ms ...store.Memory) {
	t.Helper()
	for _, m := range ms {
		must(t, st.WriteMemory(context.Background(), m))
	}
}

func hitIDs(hs []store.MemoryHit) []string {
	return idsOf(hs, func(h store.MemoryHit) string { return h.ID })
}

func search(t *testing.T, st store.Store, query string, limit int, namespace string) []store.MemoryHit {
	t.Helper()
	hs, err := st.SearchMemory(context.Background(), query, limit, namespace)
	if err != nil {
		t.Fatalf("SearchMemory(%q, %d, %q): %v", query, limit, namespace, err)
	}
	for i := 1; i < len(hs); i++ {
		if hs[i].Score > hs[i-1].Score {
			t.Fatalf("SearchMemory(%q): hits not ordered by score: %v then %v", query, hs[i-1].Score, hs[i].Score)
		}
	}
	return hs
}

func wantHits(t *testing.T, hs []store.MemoryHit, want ...string) {
	t.Helper()
	if got := hitIDs(hs); !slices.Equal(got, want) {
		t.Fatalf("hits = %v, want %v", got, want)
	}
}

func testMemoryWrite(t *testing.T, st store.Store) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		m    store.Memory
	}{
		{"empty id", note("", "default", "x", 0)},
		{"empty text", note("m-1", "default", "", 0)},
		{"empty namespace", note("m-1", "", "x", 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, st.WriteMemory(ctx, tc.m), store.ErrInvalid)
		})
	}
	writeNotes(t, st, note("m-1", "default", "The deploy key lives in the vault", 0, "ops", "secrets"))
	wantErr(t, st.WriteMemory(ctx, note("m-1", "default", "another", 1)), store.ErrConflict)

	hs := search(t, st, "vault", 0, "")
	wantHits(t, hs, "m-1")
	h := hs[0]
	if h.Text != "The deploy key lives in the vault" || h.Namespace != "default" ||
		!reflect.DeepEqual(h.Tags, []string{"ops", "secrets"}) || !h.CreatedAt.Equal(at(0)) || h.CreatedAt.Location().String() != "UTC" {
		t.Errorf("hit = %+v", h)
	}
	if h.Score <= 0 {
		t.Errorf("score = %v, want > 0 (higher is better)", h.Score)
	}

	// Tags are searched too; a note without tags comes back with none.
	writeNotes(t, st, note("m-2", "default", "no tags here", 1))
	wantHits(t, search(t, st, "secrets", 0, ""), "m-1")
	hs = search(t, st, "tags", 0, "")
	wantHits(t, hs, "m-2")
	if len(hs[0].Tags) != 0 {
		t.Errorf("tags of an untagged note = %#v, want none", hs[0].Tags)
	}
}

func testMemoryRanking(t *testing.T, st store.Store) {
	// Same length, so only the frequency of "alpha" differs.
	writeNotes(t, st,
		note("m-once", "default", "alpha beta delta gamma", 0),
		note("m-twice", "default", "alpha beta alpha gamma", 1),
		note("m-none", "default", "beta delta gamma omega", 2),
	)
	wantHits(t, search(t, st, "alpha", 0, ""), "m-twice", "m-once")
	// Case and punctuation do not matter.
	wantHits(t, search(t, st, "ALPHA!", 0, ""), "m-twice", "m-once")

	// Any word matches; a note holding more of the words ranks first.
	writeNotes(t, st,
		note("m-zeta", "default", "zeta eta theta iota", 3),
		note("m-both", "default", "zeta kappa lambda omicron", 4),
		note("m-kappa", "default", "kappa rho sigma tau", 5),
	)
	hs := search(t, st, "zeta kappa", 0, "")
	if len(hs) != 3 || hs[0].ID != "m-both" || hs[0].Score <= hs[1].Score {
		t.Fatalf("zeta kappa: hits %v with scores %v, want m-both strictly first of 3", hitIDs(hs), scores(hs))
	}
	wantHits(t, search(t, st, "nothing matches this", 0, ""))
}

func scores(hs []store.MemoryHit) []float64 {
	var out []float64
	for _, h := range hs {
		out = append(out, h.Score)
	}
	return out
}

func testMemoryNamespaceAndLimit(t *testing.T, st store.Store) {
	for i := range 5 {
		writeNotes(t, st, note(fmt.Sprintf("m-a%d", i), "a", "shared word", i))
	}
	writeNotes(t, st, note("m-b", "b", "shared word", 10))

	wantHits(t, search(t, st, "shared", 0, "b"), "m-b")
	if hs := search(t, st, "shared", 0, "a"); len(hs) != 5 {
		t.Fatalf("namespace a: %v, want 5 hits", hitIDs(hs))
	}
	if hs := search(t, st, "shared", 0, ""); len(hs) != 6 {
		t.Fatalf("every namespace: %v, want 6 hits", hitIDs(hs))
	}
	wantHits(t, search(t, st, "shared", 0, "c"))

	// Equal scores: newest first.
	wantHits(t, search(t, st, "shared", 2, "a"), "m-a4", "m-a3")
	wantHits(t, search(t, st, "shared", 1, ""), "m-b")
}

func testMemoryQueries(t *testing.T, st store.Store) {
	ctx := context.Background()
	for _, q := range []string{"", "   ", "\t\n"} {
		if _, err := st.SearchMemory(ctx, q, 10, ""); err == nil {
			t.Errorf("SearchMemory(%q): no error", q)
		} else {
			wantErr(t, err, store.ErrInvalid)
		}
	}
	writeNotes(t, st,
		note("m-1", "default", `He said "deploy" AND left: NEAR the col:x table`, 0),
		note("m-2", "default", "café crème", 1),
	)
	// Full-text syntax of either backend is plain text here: none of
	// these may fail, and their words still match.
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{`"deploy`, []string{"m-1"}},
		{`deploy"`, []string{"m-1"}},
		{`"deploy" AND`, []string{"m-1"}},
		{`NEAR(deploy left, 2)`, []string{"m-1"}},
		{`col:x`, []string{"m-1"}},
		{`deploy*`, []string{"m-1"}},
		{`^deploy`, []string{"m-1"}},
		{`-deploy`, []string{"m-1"}},
		{`deploy & !left | (table`, []string{"m-1"}},
		{`deploy <-> left`, []string{"m-1"}},
		{`'); DELETE FROM memories; --`, nil},
		{`***`, nil},
		{`"" '' :: ()`, nil},
		{`AND OR NOT`, []string{"m-1"}},
		{"CAFE\u0301", []string{"m-2"}},
	} {
		t.Run(tc.query, func(t *testing.T) {
			hs, err := st.SearchMemory(ctx, tc.query, 10, "")
			if err != nil {
				t.Fatalf("SearchMemory(%q): %v", tc.query, err)
			}
			wantHits(t, hs, tc.want...)
		})
	}
	// The notes are still there.
	wantHits(t, search(t, st, "deploy", 10, ""), "m-1")
}

func testMemoryListAndDelete(t *testing.T, st store.Store) {
	ctx := context.Background()
	writeNotes(t, st,
		note("m-1", "a", "first note", 1, "x"),
		note("m-2", "b", "second note", 2),
		note("m-3", "a", "third note", 3))
	list := func(namespace string, limit int) []string {
		t.Helper()
		ms, err := st.ListMemory(ctx, namespace, limit)
		must(t, err)
		return idsOf(ms, func(m store.Memory) string { return m.ID })
	}
	for _, tc := range []struct {
		namespace string
		limit     int
		want      []string
	}{
		{"", 0, []string{"m-3", "m-2", "m-1"}},
		{"a", 0, []string{"m-3", "m-1"}},
		{"", 2, []string{"m-3", "m-2"}},
		{"c", 0, nil},
	} {
		if got := list(tc.namespace, tc.limit); !slices.Equal(got, tc.want) {
			t.Errorf("ListMemory(%q, %d) = %v, want %v", tc.namespace, tc.limit, got, tc.want)
		}
	}
	ms, err := st.ListMemory(ctx, "a", 0)
	must(t, err)
	if m := ms[1]; m.Text != "first note" || !reflect.DeepEqual(m.Tags, []string{"x"}) || !m.CreatedAt.Equal(at(1)) || m.Namespace != "a" {
		t.Errorf("listed note = %+v", m)
	}

	must(t, st.DeleteMemory(ctx, "m-1"))
	wantErr(t, st.DeleteMemory(ctx, "m-1"), store.ErrNotFound)
	wantErr(t, st.DeleteMemory(ctx, "m-nope"), store.ErrNotFound)
	if got := list("", 0); !slices.Equal(got, []string{"m-3", "m-2"}) {
		t.Errorf("after delete: %v", got)
	}
	// The deleted note's words are no longer found.
	wantHits(t, search(t, st, "first", 0, ""))
	wantHits(t, search(t, st, "note", 0, "a"), "m-3")
}
