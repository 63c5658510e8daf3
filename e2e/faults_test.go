package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/ws"
	"github.com/trellis-run/trellis/runtime/store"
	_ "github.com/trellis-run/trellis/runtime/store/sqlite" // the "sqlite" driver, for integrity checks
)

// The failures of a store whose disk is full or read-only, as SQLite
// reports them around the errno.
var (
	errDiskFull = fmt.Errorf("sqlite: database or disk is full (SQLITE_FULL): %w", syscall.ENOSPC)
	errReadOnly = fmt.Errorf("sqlite: attempt to write a readonly database (SQLITE_READONLY): %w", syscall.EROFS)
)

// faultStore passes reads through and, once armed, fails every write.
type faultStore struct {
	store.Store
	failing atomic.Bool
	err     error       // what writes fail with once failing (default errDiskFull)
	wrapped atomic.Bool // set when a daemon picked the wrapper up
}

func (f *faultStore) check() error {
	if !f.failing.Load() {
		return nil
	}
	if f.err != nil {
		return f.err
	}
	return errDiskFull
}

func (f *faultStore) AppendEvents(ctx context.Context, w store.Writer, evs []store.Event) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.AppendEvents(ctx, w, evs)
}

func (f *faultStore) CreateSession(ctx context.Context, s store.Session) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.CreateSession(ctx, s)
}

func (f *faultStore) UpdateSession(ctx context.Context, w store.Writer, id string, u store.SessionUpdate) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.UpdateSession(ctx, w, id, u)
}

func (f *faultStore) AppendHistory(ctx context.Context, w store.Writer, id string, msgs []json.RawMessage) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.AppendHistory(ctx, w, id, msgs)
}

func (f *faultStore) ReplaceHistory(ctx context.Context, w store.Writer, id string, msgs []json.RawMessage) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.ReplaceHistory(ctx, w, id, msgs)
}

func (f *faultStore) AddPattern(ctx context.Context, p store.Pattern) (string, error) {
	if err := f.check(); err != nil {
		return "", err
	}
	return f.Store.AddPattern(ctx, p)
}

func (f *faultStore) RemovePattern(ctx context.Context, id string) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.RemovePattern(ctx, id)
}

func (f *faultStore) AppendAudit(ctx context.Context, e store.AuditEntry) (int64, error) {
	if err := f.check(); err != nil {
		return 0, err
	}
	return f.Store.AppendAudit(ctx, e)
}

func (f *faultStore) PutSetting(ctx context.Context, w store.Writer, ns, key string, v json.RawMessage) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.PutSetting(ctx, w, ns, key, v)
}

func (f *faultStore) DeleteSetting(ctx context.Context, w store.Writer, ns, key string) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.DeleteSetting(ctx, w, ns, key)
}

func (f *faultStore) DeleteSessions(ctx context.Context, w store.Writer, ids []string) (int, error) {
	if err := f.check(); err != nil {
		return 0, err
	}
	return f.Store.DeleteSessions(ctx, w, ids)
}

// startDaemonHome runs a daemon in this process in home with the test
// script as its model (startDaemonWith picks its own home; fault tests need
// to know it first).
func startDaemonHome(t testing.TB, home string, cfg daemon.Config) *daemon.Daemon {
	t.Helper()
	text := strings.ReplaceAll(testScript, "SLOWTEXT", strings.Repeat("slow ", 600))
	text = strings.ReplaceAll(text, "MANYTEXT", strings.Repeat("many ", 3000))
	text = strings.ReplaceAll(text, "FLOODTEXT", floodText)
	return startDaemonScript(t, home, cfg, text)
}

// startDaemonScript runs a daemon in this process in home with script as
// its model.
func startDaemonScript(t testing.TB, home string, cfg daemon.Config, script string) *daemon.Daemon {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Home, cfg.Provider = home, "fake:"+path
	logOnFailure(t, home)
	d, err := daemon.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

// TestFaultStoreWritesFail: the store starts failing every write (its disk
// is full, or read-only), before a turn and in the middle of one: the daemon
// keeps answering reads, nothing it had stored is lost, and once writes work
// again sessions go on with no gap in their seqs. (TestFaultStoreFullErrors
// AreClear checks what the clients are told meanwhile.)
func TestFaultStoreWritesFail(t *testing.T) {
	for name, cause := range map[string]error{"full": errDiskFull, "read-only": errReadOnly} {
		t.Run(name, func(t *testing.T) {
			d, fs := startFaultDaemon(t)
			fs.err = cause
			ctx := context.Background()
			c := helloWS(t, d)
			id := createSession(t, c, nil)
			before := promptComplete(t, c, id, "hello")

			fs.failing.Store(true)
			if err := c.Call(ctx, "session.create", map[string]any{"workdir": t.TempDir()}, nil); err == nil {
				t.Error("session.create succeeded while the store cannot write")
			}
			// Whatever these answer, the daemon must stay up and answer reads.
			c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil)
			c.Call(ctx, "session.setMode", map[string]any{"sessionId": id, "mode": "plan"}, nil)
			c.Call(ctx, "permission.allowlist.add", map[string]any{"pattern": "shell(ls)", "scope": "session", "sessionId": id}, nil)
			assertReadsWork(t, c, id, before)
			fs.failing.Store(false)
			drain(c.Events(id))
			waitIdle(t, c, id)
			promptComplete(t, c, id, "hello")

			// The store fails in the middle of a streaming turn.
			if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "many"}, nil); err != nil {
				t.Fatal(err)
			}
			collect(t, c.Events(id), "message.delta", 20)
			fs.failing.Store(true)
			assertReadsWork(t, c, id, before)
			waitIdle(t, c, id)
			fs.failing.Store(false)
			drain(c.Events(id))
			promptComplete(t, c, id, "hello")
			assertContiguous(t, c, id)
			if err := c.Call(ctx, "session.create", map[string]any{"workdir": t.TempDir()}, nil); err != nil {
				t.Fatalf("session.create once the store can write again: %v", err)
			}
		})
	}
}

// TestFaultStoreFullErrorsAreClear: while the store cannot write, a call
// that needs to write fails with an error a person can act on (not a bare
// "internal error"), and a prompt never leaves its client waiting for a
// turn that nobody will report: either session.prompt fails, or its turn
// ends with an error the client receives.
func TestFaultStoreFullErrorsAreClear(t *testing.T) {
	d, fs := startFaultDaemon(t)
	ctx := context.Background()
	c := helloWS(t, d)
	id := createSession(t, c, nil)
	fs.failing.Store(true)

	err := c.Call(ctx, "session.create", map[string]any{"workdir": t.TempDir()}, nil)
	if err == nil {
		t.Fatal("session.create succeeded while the store cannot write")
	}
	if !mentionsStorage(err.Message) {
		t.Errorf("session.create while the disk is full answered %q (%s): the message does not say that the store cannot write",
			err.Message, err.StringCode())
	}
	var turn struct {
		TurnID string `json:"turnId"`
	}
	perr := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, &turn)
	if perr != nil && !mentionsStorage(perr.Message) {
		t.Errorf("session.prompt while the disk is full answered %q (%s): the message does not say that the store cannot write",
			perr.Message, perr.StringCode())
	}
	if perr == nil {
		select {
		case <-c.Events(id):
		case <-time.After(3 * time.Second):
			t.Errorf("session.prompt answered turn %s while the store cannot write, and nothing about that turn reached "+
				"the client within 3 s: it would wait for a turn.done forever (the prompt should fail instead)", turn.TurnID)
		}
	}

	// The disk fills up in the middle of a streaming turn, then has room
	// again: the broken turn is closed before the next one runs.
	fs.failing.Store(false)
	drain(c.Events(id))
	waitIdle(t, c, id)
	var broken struct {
		TurnID string `json:"turnId"`
	}
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "many"}, &broken); err != nil {
		t.Fatal(err)
	}
	collect(t, c.Events(id), "message.delta", 20)
	fs.failing.Store(true)
	waitIdle(t, c, id)
	fs.failing.Store(false)
	promptComplete(t, c, id, "hello")
	done := assertTurnsClosed(t, id, assertContiguous(t, c, id))
	if p, ok := done[broken.TurnID]; ok && p["reason"] == "complete" {
		t.Errorf("the turn cut short by the full disk ended %v", p)
	}
}

// promptComplete runs one turn and checks that it completes.
func promptComplete(t *testing.T, c client, id, text string) []map[string]any {
	t.Helper()
	var turn struct {
		TurnID string `json:"turnId"`
	}
	if err := c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": text}, &turn); err != nil {
		t.Fatalf("session.prompt %q: %v", text, err)
	}
	// Wait for this turn's turn.done (a turn the store failed to close may
	// be closed first, with its own turn.done).
	var evs []map[string]any
	for {
		evs = append(evs, collect(t, c.Events(id), "turn.done", 1)...)
		if p := payloadOf(evs[len(evs)-1]); p["turnId"] == turn.TurnID {
			if p["reason"] != "complete" {
				t.Fatalf("turn %q ended %v: %v", text, p, eventKinds(evs))
			}
			return evs
		}
	}
}

// startFaultDaemon starts a daemon in this process whose store fails writes
// once the returned faultStore is armed.
func startFaultDaemon(t *testing.T) (*daemon.Daemon, *faultStore) {
	t.Helper()
	home := t.TempDir()
	fs := &faultStore{}
	undo := daemon.WrapStoreForTest(home, func(st store.Store) store.Store {
		fs.Store = st
		fs.wrapped.Store(true)
		return fs
	})
	t.Cleanup(undo)
	d := startDaemonHome(t, home, daemon.Config{})
	if !fs.wrapped.Load() {
		t.Skip("daemon/runtime.go does not call testStore yet (see daemon/testhooks.go)")
	}
	return d, fs
}

func mentionsStorage(msg string) bool {
	msg = strings.ToLower(msg)
	for _, w := range []string{"disk", "full", "space", "read-only", "readonly", "store", "storage", "database"} {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}

// assertReadsWork checks that the daemon answers reads, and that session id
// still replays the events it had stored (stored).
func assertReadsWork(t *testing.T, c client, id string, stored []map[string]any) {
	t.Helper()
	ctx := context.Background()
	for _, m := range []string{"system.health", "system.info", "session.list", "tool.list", "command.list", "approval.list"} {
		if err := c.Call(ctx, m, map[string]any{}, nil); err != nil {
			t.Errorf("%s while the store cannot write: %v", m, err)
		}
	}
	var res struct {
		Events []map[string]any `json:"events"`
	}
	if err := c.Call(ctx, "session.resume", map[string]any{"sessionId": id}, &res); err != nil {
		t.Fatalf("session.resume while the store cannot write: %v", err)
	}
	if len(res.Events) < len(stored) {
		t.Fatalf("session.resume returned %d events, %d were stored before", len(res.Events), len(stored))
	}
	for i, ev := range stored {
		if seqOf(res.Events[i]) != seqOf(ev) || res.Events[i]["kind"] != ev["kind"] {
			t.Fatalf("event %d changed: %v, was %v", i, res.Events[i], ev)
		}
	}
}

// assertContiguous checks that a session's stored seqs are 1..N, each once,
// and that every turn.started has exactly one turn.done.
func assertContiguous(t *testing.T, c client, id string) []map[string]any {
	t.Helper()
	var res struct {
		Events []map[string]any `json:"events"`
	}
	if err := c.Call(context.Background(), "session.resume", map[string]any{"sessionId": id, "afterSeq": 0}, &res); err != nil {
		t.Fatalf("session.resume %s: %v", id, err)
	}
	for i, ev := range res.Events {
		if seqOf(ev) != int64(i+1) {
			t.Fatalf("session %s: seq %d at position %d (a gap or a duplicate): %v", id, seqOf(ev), i, eventKinds(res.Events))
		}
	}
	return res.Events
}

// assertTurnsClosed checks that every turn.started of evs has exactly one
// turn.done, and returns the turn.done payloads by turn id.
func assertTurnsClosed(t *testing.T, id string, evs []map[string]any) map[string]map[string]any {
	t.Helper()
	open := map[string]int{}
	done := map[string]map[string]any{}
	for _, ev := range evs {
		turn := fmt.Sprint(payloadOf(ev)["turnId"])
		switch ev["kind"] {
		case "turn.started":
			open[turn]++
		case "turn.done":
			open[turn]--
			done[turn] = payloadOf(ev)
		}
	}
	for turn, n := range open {
		if n != 0 {
			t.Errorf("session %s: turn %s has %+d more turn.started than turn.done: a client still waits for it to end", id, turn, n)
		}
	}
	return done
}

// waitIdle polls session.list until the session is not running.
func waitIdle(t *testing.T, c client, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var list struct {
			Sessions []struct {
				SessionID string `json:"sessionId"`
				Running   bool   `json:"running"`
			} `json:"sessions"`
		}
		if err := c.Call(context.Background(), "session.list", map[string]any{}, &list); err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Sessions {
			if s.SessionID == id && !s.Running {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("session %s still running after 10 s", id)
}

// drain empties an event channel without waiting.
func drain(ch <-chan map[string]any) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// mountTmpfs mounts a tmpfs of size bytes at a new directory and returns
// it; the test is skipped where mounting is not allowed (not root).
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v %s; detaching it", dir, err, out)
			_ = exec.Command("umount", "-l", dir).Run()
		}
	})
	return dir
}

// fillDisk writes a file until the file system is full and returns its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	// The last partial chunk may have left a few bytes: take them too.
	for {
		if _, err := f.Write(chunk[:512]); err != nil {
			break
		}
	}
	return path
}

// TestFaultDiskFull runs the daemon on a real, small file system (a tmpfs)
// and fills it, before a turn and in the middle of one: SQLite's own
// failures reach the daemon, reads go on, and once the disk has room again
// turns complete, every session's seqs are gap-free, and the database passes
// SQLite's integrity check. (A read-only remount is refused while the daemon
// holds its files open, so the read-only case is simulated by the fault
// store in TestFaultStoreWritesFail.)
func TestFaultDiskFull(t *testing.T) {
	mnt := mountTmpfs(t, 16<<20)
	home := filepath.Join(mnt, "home")
	d := startDaemonHome(t, home, daemon.Config{})
	ctx := context.Background()
	c := helloWS(t, d)
	id := createSession(t, c, nil)
	before := promptComplete(t, c, id, "hello")

	// Full before the turn starts. A commit may still fit in the room the
	// store's files hold already (SQLite writes its log again from the
	// beginning once the log was copied into the database file), so
	// sessions are created until one needs more.
	filler := fillDisk(t, mnt)
	var err *errcode.Error
	created := 0
	for ; created < 1000 && err == nil; created++ {
		err = c.Call(ctx, "session.create", map[string]any{"workdir": t.TempDir()}, nil)
	}
	if err == nil {
		t.Error("1,000 session.create calls succeeded on a full disk")
	}
	t.Logf("full disk: session.create %d → %v", created, err)
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "many"}, nil); err == nil {
		waitIdle(t, c, id)
	}
	assertReadsWork(t, c, id, before)
	os.Remove(filler)
	drain(c.Events(id))
	waitIdle(t, c, id)
	promptComplete(t, c, id, "hello")

	// Full in the middle of a streaming turn.
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "many"}, nil); err != nil {
		t.Fatal(err)
	}
	collect(t, c.Events(id), "message.delta", 20)
	filler = fillDisk(t, mnt)
	waitIdle(t, c, id)
	assertReadsWork(t, c, id, before)
	os.Remove(filler)
	drain(c.Events(id))
	promptComplete(t, c, id, "hello")
	assertContiguous(t, c, id)

	d.Stop()
	assertIntegrity(t, filepath.Join(home, "trellis.db"))
}

// assertIntegrity runs SQLite's integrity check on a database file and
// checks that the seqs of every session's events are 1..N.
func assertIntegrity(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_query_only=1")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var verdict string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&verdict); err != nil || verdict != "ok" {
		t.Fatalf("integrity_check of %s: %q %v", path, verdict, err)
	}
	rows, err := db.Query("SELECT session_id, COUNT(*), MIN(seq), MAX(seq) FROM events GROUP BY session_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n, lo, hi int64
		if err := rows.Scan(&id, &n, &lo, &hi); err != nil {
			t.Fatal(err)
		}
		if lo != 1 || hi != n {
			t.Errorf("session %s: %d events with seqs %d..%d", id, n, lo, hi)
		}
	}
}

// TestFaultKillNineManySessions kills the daemon (SIGKILL) while several
// sessions stream turns at once, twice: after each restart every session's
// seqs are 1..N with no gap and no duplicate, every turn that was running
// ends with a synthetic turn.done{interrupted}, and every session takes a
// new turn. (TestKillNineMidTurnThenResume covers one session and its
// history in detail.)
func TestFaultKillNineManySessions(t *testing.T) {
	const sessions = 6
	home := t.TempDir()
	p := startProc(t, home)
	c := dialInfo(t, p.info)
	ctx := context.Background()
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = createSession(t, c, nil)
	}
	for cycle := 1; cycle <= 2; cycle++ {
		running := map[string]string{} // session → turn cut by the kill
		for _, id := range ids {
			var turn struct {
				TurnID string `json:"turnId"`
			}
			if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "many"}, &turn); err != nil {
				t.Fatal(err)
			}
			running[id] = turn.TurnID
		}
		for _, id := range ids {
			collect(t, c.Events(id), "message.delta", 5)
		}
		p.kill()
		c.Close()

		p = startProc(t, home)
		c = dialInfo(t, p.info)
		for _, id := range ids {
			evs := assertContiguous(t, c, id)
			done := assertTurnsClosed(t, id, evs)
			if d := done[running[id]]; d["reason"] != "interrupted" || d["synthetic"] != true {
				t.Errorf("cycle %d, session %s: the turn cut by the kill ended %v", cycle, id, d)
			}
		}
		for _, id := range ids {
			promptComplete(t, c, id, "hello")
		}
		t.Logf("cycle %d: %d sessions killed mid-turn, restarted, gap-free and resumed", cycle, sessions)
	}
}

// TestFaultStalledClientDoesNotSlowOthers: one WebSocket client subscribed
// to a streaming session stops reading, until its connection is saturated
// (the daemon's side of its socket holds unsent bytes); another WebSocket
// client and a gRPC client of the same session still receive every event of
// the turn, in order, and the stalled client, once it reads again, gets
// them all too. (TestStalledClientDoesNotHoldTheTurn checks the turn itself.)
func TestFaultStalledClientDoesNotSlowOthers(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 100,000 events")
	}
	d := startDaemon(t)
	stalled := helloWS(t, d)
	id := createSession(t, stalled, nil)
	ports := clientPorts(t, d.HTTPPort())
	if len(ports) != 1 {
		t.Fatalf("expected one client connection to the daemon, found %v", ports)
	}
	resume := stalled.pause()
	defer resume()

	ctx := context.Background()
	reader := helloWS(t, d)
	driver := dialGRPC(t, d)
	for _, c := range []client{reader, driver} {
		if err := c.Call(ctx, "session.resume", map[string]any{"sessionId": id}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := driver.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "flood"}, nil); err != nil {
		t.Fatal(err)
	}
	var last int64
	for name, c := range map[string]client{"WebSocket": reader, "gRPC": driver} {
		evs := collectWithin(t, c.Events(id), "turn.done", 90*time.Second)
		for i, ev := range evs {
			if seqOf(ev) != int64(i+1) {
				t.Fatalf("%s client: seq %d at position %d", name, seqOf(ev), i)
			}
		}
		last = seqOf(evs[len(evs)-1])
	}
	if unsent := unsentBytes(t, d.HTTPPort(), ports[0]); unsent == 0 {
		t.Fatalf("the stalled client's connection was never saturated (nothing waits to be sent to it), so this test " +
			"proves nothing: stream more")
	} else {
		t.Logf("%d events reached both readers while %d bytes waited in the stalled client's socket", last, unsent)
	}
	resume()
	got := collectWithin(t, stalled.Events(id), "turn.done", 90*time.Second)
	if int64(len(got)) != last {
		t.Fatalf("the stalled client got %d events once it read again, want %d", len(got), last)
	}
}

// collectWithin collects events until one of kind arrives, for large turns
// on a busy machine: it fails only when no event at all arrives for idle (a
// stream that stopped), never because a slow machine takes long overall.
func collectWithin(t *testing.T, ch <-chan map[string]any, kind string, idle time.Duration) []map[string]any {
	t.Helper()
	var out []map[string]any
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for {
		select {
		case ev := <-ch:
			out = append(out, ev)
			if ev["kind"] == kind {
				return out
			}
			timer.Reset(idle)
		case <-timer.C:
			t.Fatalf("no event for %v before %s; got %d events", idle, kind, len(out))
		}
	}
}

// tcpSockets lists the established IPv4 TCP connections of this machine
// as (local port, remote port, unsent bytes) from /proc/net/tcp. Sockets in
// other states are left out: a connection of an earlier test to a daemon
// that had the same port lingers in TIME_WAIT, maybe from the same client
// port (CI once saw [59054 59054]).
func tcpSockets(t *testing.T) [][3]int {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skipf("no /proc/net/tcp: %v", err)
	}
	var out [][3]int
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 || f[3] != tcpEstablished {
			continue
		}
		port := func(addr string) int {
			_, p, _ := strings.Cut(addr, ":")
			n, _ := strconv.ParseInt(p, 16, 32)
			return int(n)
		}
		tx, _, _ := strings.Cut(f[4], ":")
		unsent, _ := strconv.ParseInt(tx, 16, 64)
		out = append(out, [3]int{port(f[1]), port(f[2]), int(unsent)})
	}
	return out
}

// tcpEstablished is the st column of an established connection in
// /proc/net/tcp (include/net/tcp_states.h).
const tcpEstablished = "01"

// clientPorts returns the local ports of the connections to serverPort.
func clientPorts(t *testing.T, serverPort int) []int {
	var ports []int
	for _, s := range tcpSockets(t) {
		if s[1] == serverPort {
			ports = append(ports, s[0])
		}
	}
	return ports
}

// unsentBytes returns what the server side of the connection from
// clientPort to serverPort has not yet had acknowledged.
func unsentBytes(t *testing.T, serverPort, clientPort int) int {
	for _, s := range tcpSockets(t) {
		if s[0] == serverPort && s[1] == clientPort {
			return s[2]
		}
	}
	t.Fatalf("no connection %d → %d", clientPort, serverPort)
	return 0
}

// rawWS is a WebSocket connection that sends frames as given and hands
// every frame it receives to a channel.
type rawWS struct {
	conn   *ws.Conn
	frames chan []byte
	closed chan error
}

func dialRaw(t testing.TB, d *daemon.Daemon, opts ws.Options) (*rawWS, error) {
	conn, err := ws.Dial(context.Background(), fmt.Sprintf("ws://127.0.0.1:%d/ws", d.HTTPPort()), opts)
	if err != nil {
		return nil, err
	}
	r := &rawWS{conn: conn, frames: make(chan []byte, 4096), closed: make(chan error, 1)}
	go func() {
		for {
			data, err := conn.ReadMessage(context.Background())
			if err != nil {
				r.closed <- err
				return
			}
			r.frames <- data
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return r, nil
}

func (r *rawWS) send(t testing.TB, frame string) {
	t.Helper()
	if err := r.conn.WriteMessage(context.Background(), []byte(frame)); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// reply is one JSON-RPC reply as the tests look at it.
type reply struct {
	ID    json.RawMessage `json:"id"`
	Error *struct {
		Code    int            `json:"code"`
		Message string         `json:"message"`
		Data    map[string]any `json:"data"`
	} `json:"error"`
	Result json.RawMessage `json:"result"`
}

// until reads frames until one holds a reply with id probe, and returns the
// replies read before it (batches flattened).
func (r *rawWS) until(t testing.TB, probe string) []reply {
	t.Helper()
	var got []reply
	deadline := time.After(20 * time.Second)
	for {
		select {
		case data := <-r.frames:
			var batch []reply
			if json.Unmarshal(data, &batch) != nil {
				var one reply
				if err := json.Unmarshal(data, &one); err != nil {
					t.Fatalf("the daemon sent a frame that is not JSON: %.200q", data)
				}
				batch = []reply{one}
			}
			for _, rep := range batch {
				if string(rep.ID) == strconv.Quote(probe) {
					return got
				}
				got = append(got, rep)
			}
		case err := <-r.closed:
			t.Fatalf("the connection closed: %v (replies so far: %d)", err, len(got))
		case <-deadline:
			t.Fatalf("no reply to %s within 20 s", probe)
		}
	}
}

// more reads n more replies (none when n <= 0).
func (r *rawWS) more(t testing.TB, n int) []reply {
	t.Helper()
	var got []reply
	deadline := time.After(20 * time.Second)
	for len(got) < n {
		select {
		case data := <-r.frames:
			var batch []reply
			if json.Unmarshal(data, &batch) == nil {
				got = append(got, batch...) // the replies to a batch come as one array
				continue
			}
			var one reply
			if err := json.Unmarshal(data, &one); err != nil {
				t.Fatalf("the daemon sent a frame that is neither a reply nor an array of them: %.200q", data)
			}
			got = append(got, one)
		case err := <-r.closed:
			t.Fatalf("the connection closed: %v", err)
		case <-deadline:
			t.Fatalf("%d replies missing after 20 s", n-len(got))
		}
	}
	return got
}

func nested(depth int, leaf string) string {
	return strings.Repeat("[", depth) + leaf + strings.Repeat("]", depth)
}

// TestFaultMalformedFrames sends, in a loop on one connection, every kind of
// malformed frame: each is answered with its code (or, for responses to
// nothing and notifications, not at all), the connection keeps serving, and
// the daemon's goroutines and heap come back to where they were. A frame
// over the 32 MiB limit closes that connection only.
func TestFaultMalformedFrames(t *testing.T) {
	d := startDaemon(t)
	r, err := dialRaw(t, d, ws.Options{})
	if err != nil {
		t.Fatal(err)
	}
	helloRaw(t, r, d.Token())

	huge := strings.Repeat("x", 1<<20)
	cases := []struct {
		name  string
		frame string
		want  []int // numeric codes of the replies, in any order; none = no reply
		code  string
	}{
		{"bad JSON", `{"jsonrpc":"2.0","id":1,"method":`, []int{-32700}, "invalid_params"},
		{"not UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}", []int{-32700}, "invalid_params"},
		{"empty frame", ``, []int{-32700}, "invalid_params"},
		{"empty batch", `[]`, []int{-32600}, "invalid_params"},
		{"batch of non-objects", `[1,"a",null]`, []int{-32600, -32600, -32600}, "invalid_params"},
		{"oversized batch", "[" + strings.TrimSuffix(strings.Repeat(`{"jsonrpc":"2.0","method":"system.health"},`, 101), ",") + "]", []int{-32600}, "invalid_params"},
		{"scalar", `42`, []int{-32600}, "invalid_params"},
		{"no jsonrpc", `{"id":1,"method":"system.health"}`, []int{-32600}, "invalid_params"},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"system.health"}`, []int{-32600}, "invalid_params"},
		{"method not a string", `{"jsonrpc":"2.0","id":1,"method":5}`, []int{-32600}, "invalid_params"},
		{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"no.such.method"}`, []int{-32601}, "method_not_found"},
		{"huge unknown method", `{"jsonrpc":"2.0","id":1,"method":"` + huge + `"}`, []int{-32601}, "method_not_found"},
		{"params an array", `{"jsonrpc":"2.0","id":1,"method":"session.list","params":[1]}`, []int{-32602}, "invalid_params"},
		{"wrong type", `{"jsonrpc":"2.0","id":1,"method":"session.prompt","params":{"sessionId":42,"text":"x"}}`, []int{-32602}, "invalid_params"},
		{"unknown field", `{"jsonrpc":"2.0","id":1,"method":"session.list","params":{"zzz":1}}`, []int{-32602}, "invalid_params"},
		{"huge string", `{"jsonrpc":"2.0","id":1,"method":"session.list","params":{"workdir":"` + huge + `","zzz":"` + huge + `"}}`, []int{-32602}, "invalid_params"},
		{"huge prompt to nobody", `{"jsonrpc":"2.0","id":1,"method":"session.prompt","params":{"sessionId":"s-0000","text":"` + huge + `"}}`, []int{-32004}, "not_found"},
		{"deep nesting", `{"jsonrpc":"2.0","id":1,"method":"session.list","params":{"workdir":` + nested(5000, "1") + `}}`, []int{-32602}, "invalid_params"},
		{"deeper than JSON allows", `{"jsonrpc":"2.0","id":1,"method":"session.list","params":{"workdir":` + nested(200_000, "1") + `}}`, []int{-32700}, "invalid_params"},
		{"response to nothing", `{"jsonrpc":"2.0","id":"s999","result":{"decision":"allow"}}`, nil, ""},
		{"error response to nothing", `{"jsonrpc":"2.0","id":77,"error":{"code":-1,"message":"no"}}`, nil, ""},
		{"notification with bad params", `{"jsonrpc":"2.0","method":"session.prompt","params":{"sessionId":1}}`, nil, ""},
		{"unknown notification", `{"jsonrpc":"2.0","method":"no.such.method"}`, nil, ""},
	}
	round := func(i int) {
		for _, tc := range cases {
			r.send(t, tc.frame)
			probe := fmt.Sprintf("probe-%d-%s", i, tc.name)
			r.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"system.health"}`, probe))
			got := r.until(t, probe)
			// Handler errors may come after the probe's reply: wait for them.
			got = append(got, r.more(t, len(tc.want)-len(got))...)
			if len(got) != len(tc.want) {
				t.Fatalf("%s: %d replies, want %d: %+v", tc.name, len(got), len(tc.want), got)
			}
			for j, rep := range got {
				if rep.Error == nil || rep.Error.Code != tc.want[j] || rep.Error.Data["code"] != tc.code {
					t.Fatalf("%s: reply %+v, want code %d (%s)", tc.name, rep.Error, tc.want[j], tc.code)
				}
			}
		}
	}
	round(0)
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := ownGoroutines()
	const rounds = 10
	for i := 1; i <= rounds; i++ {
		round(i)
	}
	var m1 runtime.MemStats
	g1 := settledGoroutines(g0)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	t.Logf("%d rounds of %d malformed frames: goroutines %d → %d, heap in use %d → %d KiB",
		rounds, len(cases), g0, g1, m0.HeapInuse>>10, m1.HeapInuse>>10)
	// A goroutine leaked per malformed frame would add at least one per
	// round; a few may come and go with the daemon's own background work.
	if g1 > g0+rounds/2 {
		t.Errorf("goroutines grew from %d to %d over %d rounds:\n%s", g0, g1, rounds, goroutineSummary())
	}
	if grown := int64(m1.HeapInuse) - int64(m0.HeapInuse); grown > 32<<20 {
		t.Errorf("the heap grew by %d MiB over %d rounds", grown>>20, rounds)
	}

	// Beyond the frame limit the transport closes that connection (1009)
	// as soon as the frame's header announces the size, so the rest of the
	// write may meet a closed socket; the daemon serves the next one.
	if err := r.conn.WriteMessage(context.Background(), []byte(`{"jsonrpc":"2.0","id":1,"method":"session.list","params":{"workdir":"`+strings.Repeat("x", 33<<20)+`"}}`)); err != nil {
		t.Logf("the 33 MiB write was cut: %v", err)
	}
	select {
	case err := <-r.closed:
		t.Logf("a 33 MiB frame closed its connection: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("a 33 MiB frame did not close its connection")
	}
	c := helloWS(t, d)
	if err := c.Call(context.Background(), "system.health", map[string]any{}, nil); err != nil {
		t.Fatalf("a new connection after the oversized frame: %v", err)
	}
}

// ownGoroutines counts this process's goroutines, leaving out the job
// queue's (River starts its maintenance services a while after the daemon).
func ownGoroutines() int {
	buf := make([]byte, 8<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if !strings.Contains(g, "riverqueue") {
			n++
		}
	}
	return n
}

// goroutineSummary counts this process's goroutines by the function on top
// of their stacks (after runtime frames).
func goroutineSummary() string {
	buf := make([]byte, 8<<20)
	counts := map[string]int{}
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		lines := strings.Split(g, "\n")
		top := "?"
		for i := 1; i < len(lines); i += 2 {
			if f := strings.TrimSpace(lines[i]); !strings.HasPrefix(f, "runtime.") && !strings.HasPrefix(f, "internal/") {
				top = f
				break
			}
		}
		counts[top]++
	}
	var b strings.Builder
	for f, n := range counts {
		fmt.Fprintf(&b, "%4d %s\n", n, f)
	}
	return b.String()
}

// settledGoroutines waits (bounded) for ownGoroutines to come back to at
// most want, and returns it.
func settledGoroutines(want int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := ownGoroutines()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFaultInFlightFlood sends 3,000 requests at once on one connection
// whose client does not read meanwhile, so that their replies cannot be
// written and the requests stay in flight: past the limit of 1,024 the
// daemon answers overloaded (-32001) with data.retryAfterMs at once, every
// request gets exactly one reply, and the connection and the daemon keep
// serving. Under the race detector the client's 3,000 writes are slower
// than the daemon's answers, so the limit may never be reached: there the
// flood checks the replies and the serving after it, not the refusal.
func TestFaultInFlightFlood(t *testing.T) {
	const burst = 3000
	d := startDaemon(t)
	c := helloWS(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for attempt := 1; ; attempt++ {
		resume := c.pause()
		var ok, overloaded, other atomic.Int64
		var retryAfter atomic.Int64
		var wg sync.WaitGroup
		var sent sync.WaitGroup
		for i := 0; i < burst; i++ {
			wg.Add(1)
			sent.Add(1)
			go func() {
				defer wg.Done()
				// tool.list answers several KiB: the replies fill the
				// socket and the write queue, and the rest wait.
				err := c.callSent(ctx, "tool.list", map[string]any{}, sent.Done)
				switch {
				case err == nil:
					ok.Add(1)
				case err.StringCode() == "overloaded" && err.Code == -32001:
					overloaded.Add(1)
					if ms, _ := err.Data["retryAfterMs"].(int64); ms > 0 {
						retryAfter.Store(ms)
					}
				default:
					other.Add(1)
					t.Errorf("tool.list: %v", err)
				}
			}()
		}
		sent.Wait()
		resume()
		wg.Wait()
		t.Logf("attempt %d: %d requests at once: %d answered, %d overloaded (retryAfterMs %d), %d other",
			attempt, burst, ok.Load(), overloaded.Load(), retryAfter.Load(), other.Load())
		if ok.Load()+overloaded.Load()+other.Load() != burst {
			t.Fatalf("%d requests, %d replies", burst, ok.Load()+overloaded.Load()+other.Load())
		}
		if raceDetector && overloaded.Load() == 0 {
			t.Logf("under the race detector the flood did not reach the limit; its refusal is checked without it")
			break
		}
		if overloaded.Load() > 0 {
			if retryAfter.Load() <= 0 {
				t.Error("overloaded replies carry no data.retryAfterMs")
			}
			if ok.Load() < 1024 {
				t.Errorf("only %d requests were served before the daemon said overloaded; the limit is 1024", ok.Load())
			}
			break
		}
		if attempt == 3 {
			t.Fatalf("%d requests in flight at once were never refused as overloaded", burst)
		}
	}
	if err := c.Call(ctx, "system.health", map[string]any{}, nil); err != nil {
		t.Fatalf("the flooded connection after the flood: %v", err)
	}
	if err := helloWS(t, d).Call(ctx, "system.health", map[string]any{}, nil); err != nil {
		t.Fatalf("a new connection after the flood: %v", err)
	}
}

// callSent is Call that also reports, through sent, when the request has
// been written.
func (c *wsClient) callSent(ctx context.Context, method string, params any, sent func()) *errcode.Error {
	id := strconv.FormatInt(c.nextID.Add(1), 10)
	ch := make(chan frame, 1)
	c.mu.Lock()
	c.waiting[id] = ch
	c.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": method, "params": params})
	err := c.conn.WriteMessage(ctx, b)
	sent()
	if err != nil {
		return errcode.New(errcode.Internal, "write: %v", err)
	}
	select {
	case f := <-ch:
		return f.Error
	case <-ctx.Done():
		return errcode.New(errcode.Internal, "no reply: %v", ctx.Err())
	}
}

// TestFaultForeignOrigin: a web page of another origin cannot open a
// WebSocket to the daemon, even when the request carries the valid token,
// unless --allow-origin lists it; programs (no Origin) and pages served from
// the daemon's own loopback port can.
func TestFaultForeignOrigin(t *testing.T) {
	d := startDaemon(t)
	port := d.HTTPPort()
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"https://evil.example", false},
		{"http://evil.example", false},
		{fmt.Sprintf("http://evil.example:%d", port), false}, // DNS rebinding: the Host header says 127.0.0.1
		{"null", false},                                      // a file:// page or a sandboxed frame
		{"http://localhost:1", false},                        // another local port is another origin
		{fmt.Sprintf("http://127.0.0.1:%d", port), true},
		{fmt.Sprintf("http://localhost:%d", port), true},
		{"", true},
	} {
		h := http.Header{"Authorization": {"Bearer " + d.Token()}, "Cookie": {"token=" + d.Token()}}
		if tc.origin != "" {
			h.Set("Origin", tc.origin)
		}
		r, err := dialRaw(t, d, ws.Options{Header: h})
		if !tc.ok {
			if err == nil || !strings.Contains(err.Error(), "403") {
				t.Errorf("Origin %q with the valid token: %v, want 403 Forbidden", tc.origin, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Origin %q: %v", tc.origin, err)
			continue
		}
		helloRaw(t, r, d.Token())
	}

	cfg, err := daemon.ParseFlags("trellisd", []string{"--allow-origin", "https://evil.example, https://*.trusted.example"})
	if err != nil {
		t.Fatal(err)
	}
	allowed := startDaemonWith(t, daemon.Config{AllowOrigins: cfg.AllowOrigins})
	for _, origin := range []string{"https://evil.example", "https://app.trusted.example"} {
		r, err := dialRaw(t, allowed, ws.Options{Header: http.Header{"Origin": {origin}}})
		if err != nil {
			t.Fatalf("Origin %q listed by --allow-origin: %v", origin, err)
		}
		helloRaw(t, r, allowed.Token())
	}
	if _, err := dialRaw(t, allowed, ws.Options{Header: http.Header{"Origin": {"https://evil.example.net"}}}); err == nil {
		t.Error("an origin that only starts like an allowed one was accepted")
	}
}

// helloRaw completes system.hello on a raw connection.
func helloRaw(t *testing.T, r *rawWS, token string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "hello", "method": "system.hello",
		"params": map[string]any{"token": token, "clientVersion": "test", "protocolVersion": "1.0.0"}})
	r.send(t, string(b))
	for {
		rep := r.more(t, 1)[0]
		if string(rep.ID) == `"hello"` {
			if rep.Error != nil {
				t.Fatalf("hello: %+v", rep.Error)
			}
			return
		}
	}
}

// TestFaultTokenNeverLogged runs a daemon as a child process at debug level,
// logging to stderr too, and uses the token every way there is (WebSocket
// hello, REST Bearer, gRPC metadata), right and wrong; then greps the log
// file and stderr: neither the token nor the wrong one appears. Every file
// the daemon keeps in its home is private (no group or other access: token
// and daemon.json 0600 as PROTOCOL.md says), and the token survives a
// restart. (TestDaemonFiles checks the files of an in-process daemon.)
func TestFaultTokenNeverLogged(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home") // the daemon creates it
	var stderr bytes.Buffer
	p := startProcArgs(t, home, &stderr, "--log-level", "debug", "--log-stderr")
	token := p.info.Token
	wrong := strings.Repeat("Zq9", 15)
	ctx := context.Background()

	// WebSocket: a wrong token, then the right one, and a foreign page
	// that carries the token in its headers.
	url := fmt.Sprintf("ws://127.0.0.1:%d/ws", p.info.Port)
	for _, tok := range []string{wrong, token} {
		conn, err := ws.Dial(ctx, url, ws.Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "system.hello",
			"params": map[string]any{"token": tok, "clientVersion": "test", "protocolVersion": "1.0.0"}})
		conn.WriteMessage(ctx, b)
		conn.ReadMessage(ctx)
		conn.WriteMessage(ctx, []byte(`{"jsonrpc":"2.0","id":2,"method":"session.list","params":{"token":"`+tok+`"}}`))
		conn.ReadMessage(ctx)
		conn.Close()
	}
	if _, err := ws.Dial(ctx, url, ws.Options{Header: http.Header{"Origin": {"https://evil.example"}, "Authorization": {"Bearer " + token}}}); err == nil {
		t.Fatal("a foreign origin was accepted")
	}
	// REST and gRPC, right and wrong.
	base := fmt.Sprintf("http://127.0.0.1:%d", p.info.Port)
	for _, tok := range []string{wrong, token} {
		httpGet(t, base+"/v1/system/info", tok)
		httpGet(t, base+"/v1/session/list?token="+tok, tok)
		g := dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", p.info.GRPCPort), tok)
		g.Call(ctx, "system.info", map[string]any{}, nil)
		g.Call(ctx, "session.create", map[string]any{"workdir": "/does/not/exist"}, nil)
	}
	c := dialInfo(t, p.info)
	id := createSession(t, c, map[string]any{"mode": "auto"})
	promptComplete(t, c, id, "hello")
	promptComplete(t, c, id, "run ls")

	assertPrivate(t, home)
	if err := c.Call(ctx, "system.shutdown", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("the daemon exited with %v", err)
	}
	logs, err := os.ReadFile(daemon.LogPath(home))
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) == 0 || stderr.Len() == 0 {
		t.Fatalf("nothing was logged (file %d bytes, stderr %d bytes): the test greps nothing", len(logs), stderr.Len())
	}
	for name, text := range map[string][]byte{"the log file": logs, "stderr": stderr.Bytes()} {
		for what, secret := range map[string]string{"token": token, "wrong token": wrong} {
			if bytes.Contains(text, []byte(secret)) {
				i := bytes.Index(text, []byte(secret))
				t.Errorf("the %s appears in %s: %q", what, name, text[max(0, i-200):min(len(text), i+100)])
			}
		}
	}
	t.Logf("%d bytes of debug logs and %d of stderr hold neither token", len(logs), stderr.Len())

	p2 := startProcArgs(t, home, io.Discard)
	if p2.info.Token != token {
		t.Error("the token changed across a restart")
	}
	assertPrivate(t, home)
}

// assertPrivate checks that nothing in home is open to group or others,
// and that token and daemon.json are exactly 0600.
func assertPrivate(t *testing.T, home string) {
	t.Helper()
	err := filepath.WalkDir(home, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v: group or others can read it", path, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"token", "daemon.json"} {
		if st, err := os.Stat(filepath.Join(home, name)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", name, st.Mode(), err)
		}
	}
}

// startProcArgs is startProc with more daemon flags and the daemon's
// stderr sent to w.
func startProcArgs(t *testing.T, home string, w io.Writer, args ...string) *proc {
	t.Helper()
	script := filepath.Join(t.TempDir(), "script.json")
	text := strings.ReplaceAll(testScript, "SLOWTEXT", "slow")
	text = strings.ReplaceAll(text, "MANYTEXT", "many")
	if err := os.WriteFile(script, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(trellisdBin, append([]string{"--home", home, "--provider", "fake:" + script}, args...)...)
	cmd.Stderr = w
	logOnFailure(t, home)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, home: home}
	t.Cleanup(p.kill)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if info, err := daemonfile.Read(home); err == nil && info.PID == cmd.Process.Pid {
			p.info = info
			return p
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the daemon wrote no daemon.json within 20 s")
	return nil
}
