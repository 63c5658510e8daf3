package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// managedScript writes files in one turn, runs a long turn (killed
// mid-way) and reads a file back in a third.
const managedScript = `{"steps":[
 {"match":"write turn","tool_calls":[
   {"name":"write_file","arguments":{"path":"a.txt","content":"alpha\n"}},
   {"name":"write_file","arguments":{"path":"sub/b.txt","content":"beta\n"}}]},
 {"match":"slow turn","text":"slowly","delaySec":60},
 {"match":"read turn","tool_calls":[{"name":"read_file","arguments":{"path":"sub/b.txt"}}]},
 {"after_tool":"write_file","text":"Done.","repeat":true},
 {"after_tool":"read_file","text":"Read.","repeat":true},
 {"match":"hello","text":"Hello.","repeat":true}
]}`

// startMachine runs a daemon on dsn with its own home and workspace root,
// as on a machine of its own, with managedScript as its model.
func startMachine(t *testing.T, dsn string) (*proc, string) {
	t.Helper()
	home, root := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "script.json"), []byte(managedScript), 0o600); err != nil {
		t.Fatal(err)
	}
	return runClusterProc(t, home, dsn, "--workspace-root", root), root
}

// TestPostgresManagedWorkspaceFollowsTakeover: three daemons on one
// PostgreSQL database, each with its own home and workspace root. A
// session created without a workdir is managed: its files, written in a
// turn on its owner, are rebuilt from the latest checkpoint by the daemon
// that takes the session over after a kill -9 mid-turn (a checkpoint event
// with reason materialise), and the next turn reads them there; no event
// is lost. An unmanaged session whose workdir is gone on the daemon taking
// it over is refused with workdir_missing.
func TestPostgresManagedWorkspaceFollowsTakeover(t *testing.T) {
	dsn := pgtest.FreshDatabase(t, pgtest.Server(t))
	db := clusterDB(t, dsn)
	ctx := context.Background()
	procs, roots := make([]*proc, 3), make([]string, 3)
	clients := make([]*grpcClient, 3)
	for i := range procs {
		procs[i], roots[i] = startMachine(t, dsn)
		clients[i] = dialInfo(t, procs[i].info)
	}
	a := clients[0]

	var created struct {
		SessionID string `json:"sessionId"`
	}
	if err := a.Call(ctx, "session.create", map[string]any{"mode": "auto"}, &created); err != nil {
		t.Fatalf("session.create without a workdir: %v", err)
	}
	id := created.SessionID
	for i, c := range clients {
		got := listed(t, c, id)
		if got["workspace"] != "managed" || got["workdir"] != filepath.Join(realPath(t, roots[i]), id) {
			t.Fatalf("session.list on daemon %d: workspace %v, workdir %v; want managed in %s", i, got["workspace"], got["workdir"], roots[i])
		}
	}
	events := a.Events(id)
	prompt := func(c *grpcClient, text string) string {
		t.Helper()
		start := time.Now()
		deadline := start.Add(60 * time.Second)
		for {
			var res struct {
				TurnID string `json:"turnId"`
			}
			err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": text}, &res)
			if err == nil {
				t.Logf("prompt %q accepted after %v", text, time.Since(start).Round(time.Millisecond))
				return res.TurnID
			}
			if time.Now().After(deadline) {
				t.Fatalf("prompt %q: still refused after 60 s: %v", text, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	prompt(a, "write turn")
	if evs := collect(t, events, "turn.done", 1); payloadOf(evs[len(evs)-1])["reason"] != "complete" {
		t.Fatalf("write turn: %v", eventKinds(evs))
	}
	if got := readFileString(t, filepath.Join(roots[0], id, "sub", "b.txt")); got != "beta\n" {
		t.Fatalf("daemon A's managed workdir holds %q", got)
	}
	slow := prompt(a, "slow turn")
	waitSessionEvents(t, db, id, func(evs []storedEvent) bool {
		started := false
		for _, e := range evs {
			started = started || e.kind == "turn.started" && e.turnID == slow
			if started && e.kind == "step.started" {
				return true
			}
		}
		return false
	}, "the model call of the slow turn")
	procs[0].kill()
	t.Logf("daemon A killed mid-turn")

	// B takes the session over with the next prompt: its workspace root
	// has no copy yet.
	if _, err := os.Stat(filepath.Join(roots[1], id)); !os.IsNotExist(err) {
		t.Fatalf("daemon B has a managed workdir before it ran the session: %v", err)
	}
	read := prompt(clients[1], "read turn")
	evs := waitSessionEvents(t, db, id, func(evs []storedEvent) bool {
		for _, e := range evs {
			if e.kind == "turn.done" && e.turnID == read {
				return true
			}
		}
		return false
	}, "turn.done of the read turn")
	closed := 0
	for i, e := range evs {
		if e.seq != int64(i+1) {
			t.Fatalf("seq %d at position %d: an event was lost or repeated", e.seq, i)
		}
		if e.kind == "turn.done" && e.turnID == slow {
			if e.reason != "interrupted" || !e.synth {
				t.Fatalf("the killed turn closed with %+v", e)
			}
			closed++
		}
	}
	if closed != 1 {
		t.Fatalf("the killed turn has %d turn.done, want 1", closed)
	}
	var cps []checkpointRow
	var res struct {
		Checkpoints []checkpointRow `json:"checkpoints"`
	}
	if err := clients[1].Call(ctx, "checkpoint.list", map[string]any{"sessionId": id}, &res); err != nil {
		t.Fatal(err)
	}
	cps = res.Checkpoints
	last := cps[len(cps)-1]
	if last.Reason != "materialise" || last.TurnID == nil || *last.TurnID != read || last.Files != 2 {
		t.Fatalf("latest checkpoint %+v, want the materialise of turn %s with 2 files", last, read)
	}
	// The read turn's events, through B: materialise before the read.
	var replay struct {
		Events []map[string]any `json:"events"`
	}
	if err := clients[1].Call(ctx, "session.resume", map[string]any{"sessionId": id, "afterSeq": last.Seq - 1}, &replay); err != nil {
		t.Fatal(err)
	}
	var output string
	for _, e := range replay.Events {
		if p := payloadOf(e); e["kind"] == "tool.result" && p["name"] == "read_file" {
			if p["ok"] != true {
				t.Fatalf("read_file on daemon B failed: %v", p["error"])
			}
			output, _ = p["output"].(string)
		}
	}
	if !strings.Contains(output, "beta") {
		t.Fatalf("read_file on daemon B read %q, want the checkpoint's sub/b.txt", output)
	}
	if got := readFileString(t, filepath.Join(roots[1], id, "a.txt")); got != "alpha\n" {
		t.Fatalf("daemon B's managed workdir a.txt = %q", got)
	}
	t.Logf("managed session: %d events, seq 1..%d; daemon B rebuilt %d files from checkpoint %v before turn %s", len(evs), len(evs), last.Files, last.CheckpointID, read)

	// An unmanaged session: its workdir is gone where it is taken over.
	b, c := clients[1], clients[2]
	wd := t.TempDir()
	other := createSession(t, b, map[string]any{"workdir": wd, "mode": "auto"})
	if got := listed(t, c, other); got["workspace"] != "unmanaged" || got["workdir"] != realPath(t, wd) {
		t.Fatalf("session.list shows an unmanaged session as %v in %v", got["workspace"], got["workdir"])
	}
	if err := b.Call(ctx, "session.prompt", map[string]any{"sessionId": other, "text": "hello"}, nil); err != nil {
		t.Fatal(err)
	}
	collect(t, b.Events(other), "turn.done", 1)
	procs[1].kill()
	start := time.Now()
	if err := os.RemoveAll(wd); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": other, "text": "hello"}, nil)
		if err != nil && err.StringCode() == errcode.WorkdirMissing {
			if !strings.Contains(err.Message, wd) {
				t.Fatalf("workdir_missing does not name the workdir: %v", err)
			}
			t.Logf("unmanaged session taken over without its workdir: %s after %v", err.StringCode(), time.Since(start).Round(time.Millisecond))
			break
		}
		if err == nil {
			t.Fatal("a prompt to a session whose workdir is gone was accepted")
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %v after 60 s, want workdir_missing", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitSessionEvents waits until the stored events of session id satisfy ok.
func waitSessionEvents(t *testing.T, db *pgx.Conn, id string, ok func([]storedEvent) bool, what string) []storedEvent {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		evs := storedEvents(t, db, id)
		if ok(evs) {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 60 s; last events %v", what, evs[max(0, len(evs)-5):])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// listed is session id as session.list on c shows it.
func listed(t *testing.T, c *grpcClient, id string) map[string]any {
	t.Helper()
	var res struct {
		Sessions []map[string]any `json:"sessions"`
	}
	if err := c.Call(context.Background(), "session.list", map[string]any{}, &res); err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Sessions {
		if s["sessionId"] == id {
			return s
		}
	}
	t.Fatalf("session.list has no session %s", id)
	return nil
}

// realPath is p with its symlinks resolved.
func realPath(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
