package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/trellis-run/trellis/runtime/store"
)

// chunks returns a next func over parts, and a pointer to how many it
// handed out.
func chunks(parts ...[]byte) (func() ([]byte, error), *int) {
	calls := new(int)
	return func() ([]byte, error) {
		if *calls >= len(parts) {
			return nil, io.EOF
		}
		*calls++
		return parts[*calls-1], nil
	}, calls
}

func hashOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func readBlob(t *testing.T, st store.Store, sessionID, hash string) ([]byte, int) {
	t.Helper()
	var buf bytes.Buffer
	n := 0
	must(t, st.ReadBlob(context.Background(), sessionID, hash, func(c []byte) error {
		n++
		buf.Write(c)
		return nil
	}))
	return buf.Bytes(), n
}

func putBlob(t *testing.T, st store.Store, sessionID string, content []byte) string {
	t.Helper()
	h := hashOf(content)
	next, _ := chunks(content)
	must(t, putOne(context.Background(), st, sessionID, h, int64(len(content)), next))
	return h
}

// putOne puts one blob.
func putOne(ctx context.Context, st store.Store, sessionID, hash string, size int64, next func() ([]byte, error)) error {
	return st.PutBlobs(ctx, sessionID, []store.BlobSource{{Hash: hash, Size: size, Next: next}})
}

// testCheckpointBlobs: a blob is stored once per session however often it
// is put (the second put reads nothing), a large blob of many chunks comes
// back whole and in order, a put whose chunks fail keeps nothing (of any
// blob put with them), and
// another session does not share the first one's blobs.
func testCheckpointBlobs(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-1", "s-2")

	small := []byte("hello\n")
	h := putBlob(t, st, "s-1", small)
	before, err := st.CheckpointBytes(ctx, "s-1")
	must(t, err)
	if before != int64(len(small)) {
		t.Errorf("stored bytes %d, want %d", before, len(small))
	}
	next, calls := chunks(small)
	must(t, putOne(ctx, st, "s-1", h, int64(len(small)), next))
	if *calls != 0 {
		t.Errorf("putting a held blob again read %d chunks", *calls)
	}
	if after, err := st.CheckpointBytes(ctx, "s-1"); err != nil || after != before {
		t.Errorf("stored bytes after a second put %d (%v), want %d", after, err, before)
	}

	// Large: 5 chunks of 1 MiB of incompressible bytes.
	r := rand.New(rand.NewPCG(1, 2))
	var parts [][]byte
	var whole []byte
	for range 5 {
		p := make([]byte, 1<<20)
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		parts = append(parts, p)
		whole = append(whole, p...)
	}
	bigHash := hashOf(whole)
	next, _ = chunks(parts...)
	must(t, putOne(ctx, st, "s-1", bigHash, int64(len(whole)), next))
	got, n := readBlob(t, st, "s-1", bigHash)
	if n != len(parts) || !bytes.Equal(got, whole) {
		t.Errorf("large blob: read %d bytes in %d chunks, want %d in %d", len(got), n, len(whole), len(parts))
	}
	if total, err := st.CheckpointBytes(ctx, "s-1"); err != nil || total != before+int64(len(whole)) {
		t.Errorf("stored bytes %d (%v), want %d", total, err, before+int64(len(whole)))
	}

	// A put whose chunks fail keeps nothing.
	bad := hashOf([]byte("never"))
	failing := func() func() ([]byte, error) {
		n := 0
		return func() ([]byte, error) {
			if n++; n == 1 {
				return []byte("part"), nil
			}
			return nil, errors.New("the file changed")
		}
	}()
	// So does every blob of the same put: it is one transaction.
	other := []byte("stored with the failing one")
	next, _ = chunks(other)
	if err := st.PutBlobs(ctx, "s-1", []store.BlobSource{{Hash: hashOf(other), Size: int64(len(other)), Next: next},
		{Hash: bad, Size: 9, Next: failing}}); err == nil {
		t.Error("a put whose chunks failed succeeded")
	}
	if missing, err := st.MissingBlobs(ctx, "s-1", []string{hashOf(other)}); err != nil || len(missing) != 1 {
		t.Errorf("the blob put with a failing one: missing %v (%v), want it missing", missing, err)
	}
	missing, err := st.MissingBlobs(ctx, "s-1", []string{h, bad, bigHash, bad})
	must(t, err)
	if len(missing) != 1 || missing[0] != bad {
		t.Errorf("missing %v, want only %s", missing, bad)
	}
	// No hashes (a nil list) miss nothing, also of a session holding none.
	if missing, err := st.MissingBlobs(ctx, "s-2", nil); err != nil || len(missing) != 0 {
		t.Errorf("nil hashes: missing %q (%v), want none", missing, err)
	}
	// Blobs are per session.
	if missing, err := st.MissingBlobs(ctx, "s-2", []string{h}); err != nil || len(missing) != 1 {
		t.Errorf("s-2 missing %v (%v), want s-1's blob", missing, err)
	}
	wantErr(t, st.ReadBlob(ctx, "s-2", h, func([]byte) error { return nil }), store.ErrNotFound)
	next, _ = chunks(small)
	wantErr(t, putOne(ctx, st, "s-none", h, int64(len(small)), next), store.ErrNotFound)
}

// testCheckpointRoundTrip: a checkpoint is stored only once its blobs
// are, reads back as written, lists by seq, and its deletion collects the
// blobs no other checkpoint names.
func testCheckpointRoundTrip(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-1")
	shared := putBlob(t, st, "s-1", []byte("shared"))
	only := putBlob(t, st, "s-1", []byte("only in c-2"))
	m1 := putBlob(t, st, "s-1", []byte(`{"entries":[1]}`))
	m2 := putBlob(t, st, "s-1", []byte(`{"entries":[2]}`))
	skipped := json.RawMessage(`[{"path":"big.bin","reason":"too_large","size":99}]`)
	c1 := store.Checkpoint{SessionID: "s-1", CheckpointID: "c-1", Seq: 7, TurnID: "t-1", Reason: store.CheckpointTool,
		Tool: "write_file", CallID: "call-1", Manifest: m1, Digest: "d1", Files: 1, Bytes: 6, Skipped: skipped,
		Blobs: []string{shared}, CreatedAt: t0}
	c2 := store.Checkpoint{SessionID: "s-1", CheckpointID: "c-2", Seq: 3, TurnID: "t-0", Reason: store.CheckpointTurn,
		Manifest: m2, Digest: "d2", Files: 2, Bytes: 17, Blobs: []string{shared, only, only}, CreatedAt: at(1)}

	ghost := c1
	ghost.CheckpointID, ghost.Blobs = "c-ghost", []string{hashOf([]byte("not stored"))}
	wantErr(t, st.PutCheckpoint(ctx, ghost), store.ErrNotFound)
	bad := c1
	bad.Reason = "whim"
	wantErr(t, st.PutCheckpoint(ctx, bad), store.ErrInvalid)
	noSession := c1
	noSession.SessionID = "s-none"
	wantErr(t, st.PutCheckpoint(ctx, noSession), store.ErrNotFound)

	must(t, st.PutCheckpoint(ctx, c1))
	must(t, st.PutCheckpoint(ctx, c2))
	wantErr(t, st.PutCheckpoint(ctx, c1), store.ErrConflict)

	got, err := st.GetCheckpoint(ctx, "s-1", "c-1")
	must(t, err)
	want := c1
	want.Blobs = nil
	if !jsonEqual(got.Skipped, want.Skipped) || got.CreatedAt.Location() != want.CreatedAt.Location() {
		t.Errorf("skipped %s at %v, want %s at %v", got.Skipped, got.CreatedAt, want.Skipped, want.CreatedAt)
	}
	got.Skipped, want.Skipped = nil, nil
	if !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("created %v, want %v", got.CreatedAt, want.CreatedAt)
	}
	got.CreatedAt, want.CreatedAt = t0, t0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	list, err := st.ListCheckpoints(ctx, "s-1")
	must(t, err)
	if len(list) != 2 || list[0].CheckpointID != "c-2" || list[1].CheckpointID != "c-1" {
		t.Fatalf("list %+v, want c-2 then c-1 (by seq)", list)
	}
	if !jsonEqual(list[0].Skipped, json.RawMessage(`[]`)) {
		t.Errorf("no skipped paths read back as %s", list[0].Skipped)
	}
	wantErr(t, func() error { _, err := st.GetCheckpoint(ctx, "s-1", "c-none"); return err }(), store.ErrNotFound)
	if latest, err := st.LatestCheckpoint(ctx, "s-1"); err != nil || latest.CheckpointID != "c-1" {
		t.Errorf("latest %+v (%v), want c-1 (the highest seq)", latest, err)
	}
	wantErr(t, func() error { _, err := st.LatestCheckpoint(ctx, "s-none"); return err }(), store.ErrNotFound)

	must(t, st.DeleteCheckpoint(ctx, "s-1", "c-2"))
	wantErr(t, st.DeleteCheckpoint(ctx, "s-1", "c-2"), store.ErrNotFound)
	missing, err := st.MissingBlobs(ctx, "s-1", []string{shared, only, m1, m2})
	must(t, err)
	if len(missing) != 2 || !contains(missing, only) || !contains(missing, m2) {
		t.Errorf("after deleting c-2, missing %v, want its own blobs only (%s, %s)", missing, only, m2)
	}
	if _, err := st.GetCheckpoint(ctx, "s-1", "c-1"); err != nil {
		t.Errorf("c-1 after deleting c-2: %v", err)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// testCheckpointsGoWithSession: deleting a session deletes its
// checkpoints and blobs, and only its own.
func testCheckpointsGoWithSession(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-1", "s-2")
	for _, id := range []string{"s-1", "s-2"} {
		b := putBlob(t, st, id, []byte("content"))
		m := putBlob(t, st, id, []byte("manifest"))
		must(t, st.PutCheckpoint(ctx, store.Checkpoint{SessionID: id, CheckpointID: "c-1", Seq: 1, Reason: store.CheckpointTurn,
			Manifest: m, Digest: "d", Files: 1, Bytes: 7, Blobs: []string{b}, CreatedAt: t0}))
	}
	n, err := st.DeleteSessions(ctx, store.Unfenced(), []string{"s-1"})
	must(t, err)
	if n != 1 {
		t.Fatalf("deleted %d sessions", n)
	}
	if list, err := st.ListCheckpoints(ctx, "s-1"); err != nil || len(list) != 0 {
		t.Errorf("checkpoints of a deleted session: %v (%v)", list, err)
	}
	if b, err := st.CheckpointBytes(ctx, "s-1"); err != nil || b != 0 {
		t.Errorf("blob bytes of a deleted session: %d (%v)", b, err)
	}
	if list, err := st.ListCheckpoints(ctx, "s-2"); err != nil || len(list) != 1 {
		t.Errorf("checkpoints of the other session: %v (%v)", list, err)
	}
	if got, _ := readBlob(t, st, "s-2", hashOf([]byte("content"))); string(got) != "content" {
		t.Errorf("the other session's blob reads %q", got)
	}
}
