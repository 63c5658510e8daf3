package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, to read PostgreSQL's stored events
	_ "modernc.org/sqlite"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// home is one daemon home of the export tests: its config and where its
// store's rows can be read.
type home struct {
	name string
	cfg  func(t *testing.T) daemon.Config
}

// storedEventRows reads a session's events as its store keeps them: seq,
// kind, the payload's bytes and the time in microseconds.
func storedEventRows(t *testing.T, d *daemon.Daemon, cfg daemon.Config, id string) []string {
	t.Helper()
	driver, dsn, q := "sqlite", filepath.Join(d.Home(), sqlite.FileName),
		`SELECT seq, kind, CAST(payload AS BLOB), ts FROM events WHERE session_id = $1 ORDER BY seq`
	if cfg.Store != "" {
		driver, dsn = "pgx", cfg.Store
		q = `SELECT seq, kind, convert_to(payload::text, 'UTF8'), (extract(epoch FROM ts) * 1000000)::bigint FROM events WHERE session_id = $1 ORDER BY seq`
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(q, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var seq, ts int64
		var kind string
		var payload []byte
		if err := rows.Scan(&seq, &kind, &payload, &ts); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d|%s|%s|%d", seq, kind, payload, ts))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func fileCall(t *testing.T, d *daemon.Daemon, method, path string, body []byte) (int, []byte) {
	t.Helper()
	return fileCallAs(t, d, d.Token(), method, path, body)
}

func fileCallAs(t *testing.T, d *daemon.Daemon, token, method, path string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", d.HTTPPort(), path), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, b
}

func hashFiles(t *testing.T, dir string, names ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		s := sha256.Sum256(b)
		out[n] = hex.EncodeToString(s[:])
	}
	return out
}

func sessionIDs(t *testing.T, c *wsClient, params map[string]any) []string {
	t.Helper()
	var res struct {
		Sessions []struct {
			SessionID string `json:"sessionId"`
		} `json:"sessions"`
	}
	if err := c.Call(context.Background(), "session.list", params, &res); err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, s := range res.Sessions {
		ids = append(ids, s.SessionID)
	}
	return ids
}

// TestSessionExportImport: a session of two turns that changed files is
// exported over REST from one home and imported over REST into another
// (SQLite to PostgreSQL and back when TRELLIS_TEST_POSTGRES is set): the
// imported events have the same stored bytes, seqs and times, and its
// latest checkpoint restores the same files. The file with one byte
// flipped, or cut short, is refused with invalid_params and imports
// nothing; the same id again is refused, a new id imports a copy. The
// imported session, archived, refuses a prompt with session_archived and
// is listed apart until unarchived.
func TestSessionExportImport(t *testing.T) {
	homes := []home{{"sqlite", func(*testing.T) daemon.Config { return daemon.Config{} }}}
	if os.Getenv("TRELLIS_TEST_POSTGRES") != "" {
		homes = append(homes, home{"postgres", func(t *testing.T) daemon.Config {
			return daemon.Config{Store: pgtest.FreshSchema(t, pgtest.Server(t))}
		}})
	}
	for _, from := range homes {
		for _, to := range homes {
			if len(homes) > 1 && from.name == to.name {
				continue
			}
			t.Run(from.name+"→"+to.name, func(t *testing.T) { testSessionExportImport(t, from, to) })
		}
	}
}

func testSessionExportImport(t *testing.T, from, to home) {
	ctx := context.Background()
	cfgA, cfgB := from.cfg(t), to.cfg(t)
	a := startDaemonScript(t, t.TempDir(), cfgA, checkpointScript)
	b := startDaemonScript(t, t.TempDir(), cfgB, checkpointScript)
	ca, cb := helloWS(t, a), helloWS(t, b)
	wd := t.TempDir()
	var created struct {
		SessionID string `json:"sessionId"`
	}
	if err := ca.Call(ctx, "session.create", map[string]any{"workdir": wd, "mode": "auto"}, &created); err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	runTurn(t, ca, id, "first turn")
	runTurn(t, ca, id, "second turn")
	files := []string{"a.txt", "bin2.dat", "big.bin", ".gitignore"}
	want := hashFiles(t, wd, files...)

	code, file := fileCall(t, a, "GET", "/v1/sessions/"+id+"/export", nil)
	if code != 200 || !bytes.HasPrefix(file, []byte(`{"format":"trellis-session","version":2}`+"\n")) {
		t.Fatalf("export: %d %.200s", code, file)
	}
	if code, body := fileCall(t, a, "GET", "/v1/sessions/s-none/export", nil); code != 404 || !bytes.Contains(body, []byte(`"not_found"`)) {
		t.Fatalf("export of an unknown session: %d %s", code, body)
	}

	before := sessionIDs(t, cb, map[string]any{"includeClosed": true})
	flipped := bytes.Clone(file)
	flipped[len(flipped)/2] ^= 0x01
	for name, damaged := range map[string][]byte{"one byte flipped": flipped, "truncated": file[:len(file)*2/3]} {
		code, body := fileCall(t, b, "POST", "/v1/sessions/import", damaged)
		if code != 400 || !bytes.Contains(body, []byte(`"invalid_params"`)) || !bytes.Contains(body, []byte("not a valid trellis session file")) {
			t.Fatalf("import of a file %s: %d %s", name, code, body)
		}
		if after := sessionIDs(t, cb, map[string]any{"includeClosed": true}); !reflect.DeepEqual(after, before) {
			t.Fatalf("after the import of a file %s: sessions %v, before %v", name, after, before)
		}
	}

	code, body := fileCall(t, b, "POST", "/v1/sessions/import", file)
	var imported struct {
		SessionID string `json:"sessionId"`
		Events    int64  `json:"events"`
	}
	if code != 200 || json.Unmarshal(body, &imported) != nil || imported.SessionID != id || imported.Events == 0 {
		t.Fatalf("import: %d %s", code, body)
	}
	evA, evB := storedEventRows(t, a, cfgA, id), storedEventRows(t, b, cfgB, id)
	if len(evA) == 0 || !reflect.DeepEqual(evA, evB) {
		t.Fatalf("stored events differ: %d on %s, %d on %s", len(evA), from.name, len(evB), to.name)
	}
	if int64(len(evB)) != imported.Events {
		t.Fatalf("import counted %d events, %d stored", imported.Events, len(evB))
	}
	if code, body := fileCall(t, b, "POST", "/v1/sessions/import", file); code != 400 || !bytes.Contains(body, []byte("exists")) {
		t.Fatalf("import of an existing id: %d %s", code, body)
	}
	if code, body := fileCall(t, b, "POST", "/v1/sessions/import?sessionId=s-copy", file); code != 200 || !bytes.Contains(body, []byte(`"s-copy"`)) {
		t.Fatalf("import under a new id: %d %s", code, body)
	}

	// The history journal came along: forked at the end of the first
	// turn, the imported session gives the history the original had there.
	cps := listCheckpoints(t, ca, id)
	if len(cps) < 2 {
		t.Fatalf("%d checkpoints", len(cps))
	}
	at := cps[len(cps)/2].Seq
	var fa, fb forked
	if err := ca.Call(ctx, "session.fork", map[string]any{"sessionId": id, "atSeq": at, "workdir": filepath.Join(t.TempDir(), "fa")}, &fa); err != nil {
		t.Fatalf("fork of the original at %d: %v", at, err)
	}
	if err := cb.Call(ctx, "session.fork", map[string]any{"sessionId": id, "atSeq": at, "workdir": filepath.Join(t.TempDir(), "fb")}, &fb); err != nil {
		t.Fatalf("fork of the imported session at %d: %v", at, err)
	}
	ha, hb := historyOf(t, openStore(t, cfgA, a.Home()), fa.SessionID), historyOf(t, openStore(t, cfgB, b.Home()), fb.SessionID)
	if len(ha) == 0 || fa.Messages != len(ha) || !reflect.DeepEqual(ha, hb) {
		t.Fatalf("forks at %d: %d messages from the original, %d from the import; %v vs %v", at, fa.Messages, fb.Messages, ha, hb)
	}

	// The workdir loses its files; the imported session's latest
	// checkpoint puts the same ones back.
	for _, n := range files {
		if err := os.Remove(filepath.Join(wd, n)); err != nil {
			t.Fatal(err)
		}
	}
	list := listCheckpoints(t, cb, id)
	if len(list) == 0 {
		t.Fatal("the imported session has no checkpoints")
	}
	if err := cb.Call(ctx, "checkpoint.restore", map[string]any{"sessionId": id, "checkpointId": list[len(list)-1].CheckpointID, "force": true}, nil); err != nil {
		t.Fatalf("restore on the imported session: %v", err)
	}
	if got := hashFiles(t, wd, files...); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored files %v, want %v", got, want)
	}

	// Archived: read-only and listed apart.
	if err := cb.Call(ctx, "session.archive", map[string]any{"sessionId": id}, nil); err != nil {
		t.Fatal(err)
	}
	err := cb.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "third turn"}, nil)
	if err == nil || !err.HasCode("session_archived") {
		t.Fatalf("prompt of an archived session: %v, want session_archived", err)
	}
	for _, ids := range [][]string{sessionIDs(t, cb, map[string]any{"includeClosed": true}), sessionIDs(t, cb, map[string]any{})} {
		for _, s := range ids {
			if s == id {
				t.Fatalf("session.list lists the archived session: %v", ids)
			}
		}
	}
	if got := sessionIDs(t, cb, map[string]any{"archived": true}); !reflect.DeepEqual(got, []string{id}) {
		t.Fatalf("session.list archived: %v", got)
	}
	if err := cb.Call(ctx, "session.unarchive", map[string]any{"sessionId": id}, nil); err != nil {
		t.Fatal(err)
	}
	runTurn(t, cb, id, "third turn")
}

// TestSessionFileAccess: import needs a member (a viewer's key is
// forbidden); export needs access to the session (another principal's
// session is not_found to a member); the imported session belongs to the
// member who imported it, who can then export it.
func TestSessionFileAccess(t *testing.T) {
	d := startDaemonScript(t, t.TempDir(), daemon.Config{}, checkpointScript)
	admin := helloWS(t, d)
	id := createSession(t, admin, nil)
	code, file := fileCall(t, d, "GET", "/v1/sessions/"+id+"/export", nil)
	if code != 200 {
		t.Fatalf("export: %d %s", code, file)
	}
	_, viewer := makePrincipal(t, admin, "vera", "viewer")
	_, member := makePrincipal(t, admin, "mo", "member")
	if code, body := fileCallAs(t, d, viewer, "POST", "/v1/sessions/import?sessionId=s-by-viewer", file); code != 403 || !bytes.Contains(body, []byte(`"forbidden"`)) {
		t.Fatalf("import as a viewer: %d %s", code, body)
	}
	if code, body := fileCallAs(t, d, member, "GET", "/v1/sessions/"+id+"/export", nil); code != 404 || !bytes.Contains(body, []byte(`"not_found"`)) {
		t.Fatalf("export of another principal's session as a member: %d %s", code, body)
	}
	if code, body := fileCallAs(t, d, member, "POST", "/v1/sessions/import?sessionId=s-by-member", file); code != 200 {
		t.Fatalf("import as a member: %d %s", code, body)
	}
	if code, body := fileCallAs(t, d, member, "GET", "/v1/sessions/s-by-member/export", nil); code != 200 || !bytes.HasPrefix(body, []byte(`{"format":"trellis-session"`)) {
		t.Fatalf("export of the imported session by its importer: %d %.200s", code, body)
	}
}
