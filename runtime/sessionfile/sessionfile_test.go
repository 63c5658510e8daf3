package sessionfile_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/sessionfile"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
	"github.com/trellis-run/trellis/runtime/workspace"
)

func openSQLite(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), sqlite.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func openPostgres(t *testing.T) store.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), pgtest.FreshSchema(t, pgtest.Server(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// blobs is a store's blobs of one session as a workspace.Blobs.
type blobs struct {
	st store.Store
	id string
}

func (b blobs) Missing(ctx context.Context, h []string) ([]string, error) {
	return b.st.MissingBlobs(ctx, b.id, h)
}
func (b blobs) Put(ctx context.Context, sources []workspace.Source) error {
	put := make([]store.BlobSource, len(sources))
	for i, src := range sources {
		put[i] = store.BlobSource(src)
	}
	return b.st.PutBlobs(ctx, b.id, put)
}
func (b blobs) Read(ctx context.Context, h string, fn func([]byte) error) error {
	return b.st.ReadBlob(ctx, b.id, h, fn)
}

// fill gives session id of st events with payloads whose spelling a
// re-encoding would change, history, and two checkpoints of a workdir
// holding a file larger than one chunk.
func fill(t *testing.T, st store.Store, id string) {
	t.Helper()
	ctx := context.Background()
	created := time.Date(2026, 12, 6, 17, 0, 0, 123456000, time.UTC)
	must(t, st.CreateSession(ctx, store.Session{SessionID: id, Workdir: "/w", Kind: store.KindChat, Title: "exported", Mode: "auto",
		CreatedAt: created, LastActivityAt: created.Add(time.Minute), Backend: json.RawMessage(`{"kind":"docker"}`)}))
	var evs []store.Event
	for i := 1; i <= 2500; i++ {
		evs = append(evs, store.Event{SessionID: id, Seq: int64(i), Kind: "message.delta", TS: created.Add(time.Duration(i) * time.Microsecond),
			Payload: json.RawMessage(fmt.Sprintf(`{ "text" : "<b>&\u00e9 %d"  , "n":1.50 }`, i))})
	}
	must(t, st.AppendEvents(ctx, store.Unfenced(), evs))
	must(t, st.AppendHistory(ctx, store.Unfenced(), id, []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`), json.RawMessage(`{"role": "assistant"}`)}))

	dir := t.TempDir()
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<17)
	for i := range big {
		big[i] ^= byte(i * 7)
	}
	must(t, os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("one"), 0o644))
	checkpoint := func(cid string, seq int64) {
		m, err := workspace.Snapshot(ctx, dir, workspace.Options{})
		must(t, err)
		bl := blobs{st, id}
		missing, err := workspace.Missing(ctx, bl, m, nil)
		must(t, err)
		mh, err := workspace.Save(ctx, bl, dir, m, missing)
		must(t, err)
		must(t, st.PutCheckpoint(ctx, store.Checkpoint{SessionID: id, CheckpointID: cid, Seq: seq, TurnID: "t-1", Reason: store.CheckpointTurn,
			Manifest: mh, Digest: m.Digest(), Files: m.Files(), Bytes: m.Bytes(), Blobs: m.Hashes(), CreatedAt: created.Add(time.Second * time.Duration(seq))}))
	}
	checkpoint("c-1", 10)
	must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("two"), 0o644))
	checkpoint("c-2", 20)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// restoreLatest restores the session's latest checkpoint into a new
// directory and returns each file's SHA-256.
func restoreLatest(t *testing.T, st store.Store, id string) map[string]string {
	t.Helper()
	ctx := context.Background()
	cps, err := st.ListCheckpoints(ctx, id)
	must(t, err)
	if len(cps) == 0 {
		t.Fatalf("session %s has no checkpoints", id)
	}
	bl := blobs{st, id}
	mb, err := workspace.ReadAll(ctx, bl, cps[len(cps)-1].Manifest)
	must(t, err)
	m, err := workspace.Unmarshal(mb)
	must(t, err)
	dir := t.TempDir()
	_, err = workspace.Restore(ctx, dir, m, bl)
	must(t, err)
	out := map[string]string{}
	for _, name := range []string{"a.txt", "big.bin"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		must(t, err)
		s := sha256.Sum256(b)
		out[name] = hex.EncodeToString(s[:])
	}
	return out
}

type rawEvent struct {
	Seq     int64
	Kind    string
	Payload string
	TS      int64
}

func storedEvents(t *testing.T, st store.Store, id string) []rawEvent {
	t.Helper()
	var out []rawEvent
	must(t, st.ScanEvents(context.Background(), id, 0, 0, func(r *store.EventRow) error {
		out = append(out, rawEvent{r.Seq, string(r.Kind), string(r.Payload), r.TS.UnixMicro()})
		return nil
	}))
	return out
}

// TestRoundTrip: a session exported from one backend and imported into
// the other (SQLite to PostgreSQL and back) has the same stored event
// bytes, seqs and times, history, checkpoints, and the files its latest
// checkpoint restores; exporting the import gives the same file again.
func TestRoundTrip(t *testing.T) {
	backends := map[string]func(*testing.T) store.Store{"sqlite": openSQLite}
	if os.Getenv("TRELLIS_TEST_POSTGRES") != "" {
		backends["postgres"] = openPostgres
	}
	for fromName, from := range backends {
		for toName, to := range backends {
			t.Run(fromName+"→"+toName, func(t *testing.T) {
				ctx := context.Background()
				src, dst := from(t), to(t)
				fill(t, src, "s-orig")
				var file bytes.Buffer
				counts, err := sessionfile.Export(ctx, src, "s-orig", &file)
				must(t, err)
				if counts.Events != 2500 || counts.History != 2 || counts.Journal != 2 || counts.Checkpoints != 2 || counts.Chunks < 3 {
					t.Fatalf("counts = %+v", counts)
				}
				sess, got, err := sessionfile.Import(ctx, dst, bytes.NewReader(file.Bytes()), sessionfile.Options{})
				must(t, err)
				if got != counts || sess.SessionID != "s-orig" {
					t.Fatalf("import: %+v %+v, export counts %+v", sess, got, counts)
				}
				if a, b := storedEvents(t, src, "s-orig"), storedEvents(t, dst, "s-orig"); !reflect.DeepEqual(a, b) {
					t.Fatalf("events differ: first %+v vs %+v", a[0], b[0])
				}
				if a, b := storedEvents(t, dst, "s-orig")[0].Payload, `{ "text" : "<b>&\u00e9 1"  , "n":1.50 }`; a != b {
					t.Fatalf("payload %q, stored %q", a, b)
				}
				h1, err := src.LoadHistory(ctx, "s-orig")
				must(t, err)
				h2, err := dst.LoadHistory(ctx, "s-orig")
				must(t, err)
				if !reflect.DeepEqual(h1, h2) {
					t.Fatalf("history %s vs %s", h1, h2)
				}
				// The journal came along: the history at an earlier event is
				// known on the importing store too.
				j1, err := src.HistoryJournal(ctx, "s-orig")
				must(t, err)
				j2, err := dst.HistoryJournal(ctx, "s-orig")
				must(t, err)
				if len(j1) == 0 || !reflect.DeepEqual(j1, j2) {
					t.Fatalf("journal %+v vs %+v", j1, j2)
				}
				for _, seq := range []int64{0, 2500} {
					a, err := src.HistoryAt(ctx, "s-orig", seq)
					must(t, err)
					b, err := dst.HistoryAt(ctx, "s-orig", seq)
					must(t, err)
					if !reflect.DeepEqual(a, b) {
						t.Fatalf("history at %d: %s vs %s", seq, a, b)
					}
				}
				if a, b := restoreLatest(t, src, "s-orig"), restoreLatest(t, dst, "s-orig"); !reflect.DeepEqual(a, b) {
					t.Fatalf("files %v vs %v", a, b)
				}
				s1, err := src.GetSession(ctx, "s-orig")
				must(t, err)
				s2, err := dst.GetSession(ctx, "s-orig")
				must(t, err)
				if s1.Title != s2.Title || !s1.CreatedAt.Equal(s2.CreatedAt) || !s1.LastActivityAt.Equal(s2.LastActivityAt) || string(s1.Backend) != string(s2.Backend) || s2.LastSeq != 2500 {
					t.Fatalf("session %+v vs %+v", s1, s2)
				}
				var again bytes.Buffer
				_, err = sessionfile.Export(ctx, dst, "s-orig", &again)
				must(t, err)
				if !bytes.Equal(again.Bytes(), file.Bytes()) {
					t.Fatal("the imported session exports another file")
				}

				// The same id again is a conflict; a new id imports a copy.
				if _, _, err := sessionfile.Import(ctx, dst, bytes.NewReader(file.Bytes()), sessionfile.Options{}); !errors.Is(err, store.ErrConflict) {
					t.Fatalf("import of an existing id: %v", err)
				}
				if _, _, err := sessionfile.Import(ctx, dst, bytes.NewReader(file.Bytes()), sessionfile.Options{SessionID: "s-copy", Owner: "p-1"}); err != nil {
					t.Fatal(err)
				}
				if c, err := dst.GetSession(ctx, "s-copy"); err != nil || c.Owner != "p-1" || c.LastSeq != 2500 {
					t.Fatalf("copy %+v %v", c, err)
				}
				if a, b := restoreLatest(t, src, "s-orig"), restoreLatest(t, dst, "s-copy"); !reflect.DeepEqual(a, b) {
					t.Fatalf("files of the copy %v vs %v", a, b)
				}
			})
		}
	}
}

// exportFilled is the file of a session fill made on SQLite.
func exportFilled(t *testing.T) []byte {
	t.Helper()
	src := openSQLite(t)
	fill(t, src, "s-orig")
	var file bytes.Buffer
	_, err := sessionfile.Export(context.Background(), src, "s-orig", &file)
	must(t, err)
	return file.Bytes()
}

// TestDamagedFile: a file with one byte flipped anywhere, cut short
// anywhere, or with data after its trailer is refused with ErrCorrupt and
// leaves the store without a session.
func TestDamagedFile(t *testing.T) {
	ctx := context.Background()
	b := exportFilled(t)
	dst := openSQLite(t)
	try := func(name string, damaged []byte) {
		t.Helper()
		_, _, err := sessionfile.Import(ctx, dst, bytes.NewReader(damaged), sessionfile.Options{})
		if !errors.Is(err, sessionfile.ErrCorrupt) {
			t.Fatalf("%s: err = %v, want ErrCorrupt", name, err)
		}
		list, err := dst.ListSessions(ctx, store.SessionFilter{IncludeClosed: true})
		must(t, err)
		if len(list) != 0 {
			t.Fatalf("%s: %d sessions after a refused import", name, len(list))
		}
	}
	for _, at := range []int{5, 60, len(b) / 3, len(b) / 2, len(b) - 200, len(b) - 5} {
		d := bytes.Clone(b)
		d[at] ^= 0x01
		try(fmt.Sprintf("flip at %d", at), d)
	}
	for _, at := range []int{0, 10, len(b) / 2, len(b) - 80, len(b) - 2} {
		try(fmt.Sprintf("cut at %d", at), b[:at])
	}
	try("data after the trailer", append(bytes.Clone(b), []byte(`{"t":"history","message":"{}"}`+"\n")...))
	v3 := bytes.Replace(bytes.Clone(b), []byte(`"version":2`), []byte(`"version":3`), 1)
	try("a later version", v3)
	try("a journal that does not replay to the history", resum(t, bytes.Replace(bytes.Clone(b), []byte(`"op":"append","messages":"[`), []byte(`"op":"append","messages":"[{\"x\":1},`), 1)))
	try("a journal record in a version 1 file", resum(t, bytes.Replace(bytes.Clone(b), []byte(`"version":2`), []byte(`"version":1`), 1)))
}

// resum gives a file whose records were edited a valid trailer again.
func resum(t *testing.T, file []byte) []byte {
	t.Helper()
	lines := bytes.SplitAfter(bytes.TrimSuffix(file, []byte("\n")), []byte("\n"))
	body := bytes.Join(lines[:len(lines)-1], nil)
	var end struct {
		T      string             `json:"t"`
		Counts sessionfile.Counts `json:"counts"`
		SHA256 string             `json:"sha256"`
	}
	must(t, json.Unmarshal(lines[len(lines)-1], &end))
	end.Counts.Journal = bytes.Count(body, []byte("\n{\"t\":\"journal\""))
	sum := sha256.Sum256(body)
	end.SHA256 = hex.EncodeToString(sum[:])
	trailer, err := json.Marshal(end)
	must(t, err)
	return append(body, append(trailer, '\n')...)
}

// TestVersion1File: a file of version 1 (no history journal) imports; the
// history of its events before the import is not known, said as such.
func TestVersion1File(t *testing.T) {
	ctx := context.Background()
	file := bytes.NewBuffer(exportFilled(t))
	var v1 [][]byte
	for _, l := range bytes.SplitAfter(file.Bytes(), []byte("\n")) {
		if !bytes.HasPrefix(l, []byte(`{"t":"journal"`)) {
			v1 = append(v1, l)
		}
	}
	b := bytes.Replace(bytes.Join(v1, nil), []byte(`"version":2`), []byte(`"version":1`), 1)
	dst := openSQLite(t)
	_, counts, err := sessionfile.Import(ctx, dst, bytes.NewReader(resum(t, b)), sessionfile.Options{})
	must(t, err)
	if counts.Journal != 0 || counts.Events != 2500 {
		t.Fatalf("counts %+v", counts)
	}
	if _, err := dst.HistoryAt(ctx, "s-orig", 10); !errors.Is(err, store.ErrHistoryUnknown) {
		t.Fatalf("history at 10 of a version 1 import: %v, want ErrHistoryUnknown", err)
	}
}
