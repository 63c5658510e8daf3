package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

// testArchived: an archived session is left out of ListSessions unless
// the filter asks for archived ones, which lists it alone; unarchiving
// brings it back.
func testArchived(t *testing.T, st store.Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	for _, id := range []string{"s-a", "s-b"} {
		must(t, st.CreateSession(ctx, store.Session{SessionID: id, Kind: store.KindChat, CreatedAt: now}))
	}
	yes, no := true, false
	must(t, st.UpdateSession(ctx, store.Unfenced(), "s-a", store.SessionUpdate{Archived: &yes}))
	ids := func(f store.SessionFilter) []string {
		list, err := st.ListSessions(ctx, f)
		must(t, err)
		out := []string{}
		for _, s := range list {
			out = append(out, s.SessionID)
		}
		return out
	}
	if got := ids(store.SessionFilter{IncludeClosed: true}); !reflect.DeepEqual(got, []string{"s-b"}) {
		t.Fatalf("listed %v, want the one not archived", got)
	}
	if got := ids(store.SessionFilter{IncludeClosed: true, Archived: true}); !reflect.DeepEqual(got, []string{"s-a"}) {
		t.Fatalf("listed archived %v", got)
	}
	if s, err := st.GetSession(ctx, "s-a"); err != nil || !s.Archived {
		t.Fatalf("get: %+v %v", s, err)
	}
	must(t, st.UpdateSession(ctx, store.Unfenced(), "s-a", store.SessionUpdate{Archived: &no}))
	if got := ids(store.SessionFilter{IncludeClosed: true}); len(got) != 2 {
		t.Fatalf("after unarchive: %v", got)
	}
}

// testImportSession: ImportSession writes a session, its events, history,
// blobs and checkpoints at once; an error from fill midway leaves no
// trace of the session, and an existing id is ErrConflict.
func testImportSession(t *testing.T, st store.Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	content := []byte("file content")
	h := hashOf(content)
	fillAll := func(w store.SessionWriter) error {
		for _, err := range []error{
			w.Event(ctx, store.Event{Seq: 1, Kind: "user.message", Payload: json.RawMessage(`{ "a" :1}`), TS: now}),
			w.History(ctx, json.RawMessage(`{"role":"user"}`)),
			w.Blob(ctx, store.Blob{Hash: h, Size: int64(len(content)), Stored: int64(len(content))}),
			w.Chunk(ctx, h, 0, content),
			w.Checkpoint(ctx, store.Checkpoint{CheckpointID: "c-1", Seq: 1, Reason: store.CheckpointTurn, Manifest: h, Digest: "d", Blobs: []string{h}, CreatedAt: now}),
		} {
			if err != nil {
				return err
			}
		}
		return nil
	}
	boom := errors.New("boom")
	err := st.ImportSession(ctx, store.Session{SessionID: "s-i", Kind: store.KindChat, CreatedAt: now}, func(w store.SessionWriter) error {
		if err := fillAll(w); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("failed fill: %v", err)
	}
	if _, err := st.GetSession(ctx, "s-i"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("session after a failed import: %v", err)
	}
	if evs, err := st.ReadEvents(ctx, "s-i", 0, 0); err != nil || len(evs) != 0 {
		t.Fatalf("events after a failed import: %v %v", evs, err)
	}
	must(t, st.ImportSession(ctx, store.Session{SessionID: "s-i", Kind: store.KindChat, CreatedAt: now}, fillAll))
	evs, err := st.ReadEvents(ctx, "s-i", 0, 0)
	must(t, err)
	if len(evs) != 1 || string(evs[0].Payload) != `{ "a" :1}` || !evs[0].TS.Equal(now) {
		t.Fatalf("events %+v", evs)
	}
	if got, n := readBlob(t, st, "s-i", h); string(got) != string(content) || n != 1 {
		t.Fatalf("blob %q in %d chunks", got, n)
	}
	refs, err := st.CheckpointBlobs(ctx, "s-i", "c-1")
	must(t, err)
	if !reflect.DeepEqual(refs, []string{h}) {
		t.Fatalf("checkpoint blobs %v", refs)
	}
	bl, err := st.ListBlobs(ctx, "s-i")
	must(t, err)
	if len(bl) != 1 || bl[0] != (store.Blob{Hash: h, Size: int64(len(content)), Stored: int64(len(content))}) {
		t.Fatalf("blobs %+v", bl)
	}
	if err := st.ImportSession(ctx, store.Session{SessionID: "s-i", Kind: store.KindChat, CreatedAt: now}, fillAll); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("import of an existing id: %v", err)
	}
}
