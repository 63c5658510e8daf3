package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// checkpointScript is a 3-turn session that changes files with write_file,
// edit_file and shell: a binary file, a symlink, a file over the size
// limit and an ignored directory among them.
const checkpointScript = `{"steps":[
 {"match":"first turn","tool_calls":[
   {"name":"write_file","arguments":{"path":".gitignore","content":"node_modules/\n"}},
   {"name":"write_file","arguments":{"path":"a.txt","content":"alpha\nbeta\n"}},
   {"name":"shell","arguments":{"command":"printf 'P\\000\\001\\377' > bin.dat && ln -s a.txt link && head -c 3000 /dev/zero > big.bin && mkdir node_modules && echo m > node_modules/m.js"}}]},
 {"match":"second turn","tool_calls":[
   {"name":"edit_file","arguments":{"path":"a.txt","old":"beta","new":"gamma"}},
   {"name":"shell","arguments":{"command":"mv bin.dat bin2.dat && rm link"}}]},
 {"match":"third turn","tool_calls":[{"name":"write_file","arguments":{"path":"b.txt","content":"new\n"}}]},
 {"match":"slow turn","text":"slowly","delaySec":60},
 {"match":"big turn","tool_calls":[{"name":"shell","arguments":{"command":"head -c 2200000 /dev/urandom > r.bin"}}]},
 {"after_tool":"write_file","text":"Done.","repeat":true},
 {"after_tool":"edit_file","text":"Done.","repeat":true},
 {"after_tool":"shell","text":"Done.","repeat":true}
]}`

type checkpointRow struct {
	CheckpointID string  `json:"checkpointId"`
	Seq          int64   `json:"seq"`
	Reason       string  `json:"reason"`
	TurnID       *string `json:"turnId"`
	Tool         *string `json:"tool"`
	CallID       *string `json:"callId"`
	Files        int     `json:"files"`
	Bytes        int64   `json:"bytes"`
	Skipped      []struct {
		Path   string `json:"path"`
		Reason string `json:"reason"`
		Size   int64  `json:"size"`
	} `json:"skipped"`
	CreatedAt string `json:"createdAt"`
}

// runTurn prompts the session and returns its events up to turn.done,
// which must be complete.
func runTurn(t *testing.T, c *wsClient, id, text string) []map[string]any {
	t.Helper()
	if err := c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": text}, nil); err != nil {
		t.Fatalf("prompt %q: %v", text, err)
	}
	evs := collect(t, c.Events(id), "turn.done", 1)
	if r := payloadOf(evs[len(evs)-1])["reason"]; r != "complete" {
		t.Fatalf("turn %q ended %v: %v", text, r, eventKinds(evs))
	}
	for _, e := range evs {
		if p := payloadOf(e); e["kind"] == "tool.result" && p["ok"] != true {
			t.Fatalf("turn %q: %s failed: %v", text, p["name"], p["error"])
		}
	}
	return evs
}

func checkpointEvents(evs []map[string]any) []map[string]any {
	var out []map[string]any
	for _, e := range evs {
		if e["kind"] == "checkpoint" {
			out = append(out, e)
		}
	}
	return out
}

func listCheckpoints(t *testing.T, c *wsClient, id string) []checkpointRow {
	t.Helper()
	var res struct {
		Checkpoints []checkpointRow `json:"checkpoints"`
	}
	if err := c.Call(context.Background(), "checkpoint.list", map[string]any{"sessionId": id}, &res); err != nil {
		t.Fatalf("checkpoint.list: %v", err)
	}
	return res.Checkpoints
}

type diffResult struct {
	Diff  string `json:"diff"`
	Files []struct {
		Path, Status, Kind string
	} `json:"files"`
	Truncated bool `json:"truncated"`
}

func readFileString(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCheckpoints: through the WebSocket, a 3-turn session that changes
// files records checkpoints before its writing tools and at each turn's
// end (announced by checkpoint events with the same seqs); checkpoint.list
// shows them with what they skipped; checkpoint.diff shows the unified
// diff between two of them and against the current files; checkpoint.
// restore puts the files back (binary file and symlink included, ignored
// and over-limit files untouched), refuses with workspace_changed and the
// diff when a file changed outside the session, unless force;
// checkpoint.delete removes one; a restore during a turn is session_busy;
// bad input answers documented codes.
func TestCheckpoints(t *testing.T) { testCheckpoints(t, daemon.Config{}) }

// TestCheckpointsPostgres is TestCheckpoints on a daemon whose store is
// PostgreSQL (TRELLIS_TEST_POSTGRES, a fresh schema).
func TestCheckpointsPostgres(t *testing.T) {
	testCheckpoints(t, daemon.Config{Store: pgtest.FreshSchema(t, pgtest.Server(t))})
}

func testCheckpoints(t *testing.T, cfg daemon.Config) {
	ctx := context.Background()
	cfg.CheckpointMaxFile = 1000
	d := startDaemonScript(t, t.TempDir(), cfg, checkpointScript)
	c := helloWS(t, d)
	wd := t.TempDir()
	var created struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.Call(ctx, "session.create", map[string]any{"workdir": wd, "mode": "auto"}, &created); err != nil {
		t.Fatal(err)
	}
	id := created.SessionID

	var evs []map[string]any
	for _, text := range []string{"first turn", "second turn", "third turn"} {
		evs = append(evs, runTurn(t, c, id, text)...)
	}
	announced := checkpointEvents(evs)
	list := listCheckpoints(t, c, id)
	// Turn 1: before each of its 3 tools and at its end. Turn 2: its edit
	// finds the state of turn 1's end (not recorded again); before its
	// shell and at its end. Turn 3: at its end only.
	wantReasons := "tool:write_file tool:write_file tool:shell turn tool:shell turn turn"
	var reasons []string
	for _, cp := range list {
		r := cp.Reason
		if cp.Tool != nil {
			r += ":" + *cp.Tool
		}
		reasons = append(reasons, r)
	}
	if got := strings.Join(reasons, " "); got != wantReasons {
		t.Fatalf("checkpoints %s, want %s", got, wantReasons)
	}
	if len(announced) != len(list) {
		t.Fatalf("%d checkpoint events for %d checkpoints", len(announced), len(list))
	}
	for i, cp := range list {
		ev := announced[i]
		if seqOf(ev) != cp.Seq || payloadOf(ev)["checkpointId"] != cp.CheckpointID {
			t.Errorf("checkpoint %d: listed %s at seq %d, announced %v at seq %d", i, cp.CheckpointID, cp.Seq, payloadOf(ev)["checkpointId"], seqOf(ev))
		}
		if cp.TurnID == nil || cp.CreatedAt == "" {
			t.Errorf("checkpoint %s has no turn or time: %+v", cp.CheckpointID, cp)
		}
	}
	// A turn's end checkpoint comes before its message.done.
	for i, e := range evs {
		if e["kind"] == "checkpoint" && payloadOf(e)["reason"] == "turn" && evs[i+1]["kind"] != "message.done" {
			t.Errorf("a turn's checkpoint is followed by %v, want message.done", evs[i+1]["kind"])
		}
	}
	endOne, endTwo := list[3], list[5]
	skipped := map[string]string{}
	for _, s := range endOne.Skipped {
		skipped[s.Path] = s.Reason
		if s.Path == "big.bin" && s.Size != 3000 {
			t.Errorf("big.bin skipped with size %d", s.Size)
		}
	}
	if skipped["node_modules"] != "ignored" || skipped["big.bin"] != "too_large" || len(skipped) != 2 {
		t.Errorf("turn 1's end skipped %v, want node_modules ignored and big.bin too_large", skipped)
	}
	if endOne.Files != 4 { // .gitignore, a.txt, bin.dat, link
		t.Errorf("turn 1's end recorded %d files, want 4", endOne.Files)
	}

	t.Run("diff", func(t *testing.T) {
		var res diffResult
		if err := c.Call(ctx, "checkpoint.diff", map[string]any{"sessionId": id, "from": endOne.CheckpointID, "to": endTwo.CheckpointID}, &res); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n alpha\n-beta\n+gamma\n",
			"diff --git a/bin.dat b/bin.dat\ndeleted file mode 100644\nBinary files a/bin.dat and /dev/null differ\n",
			"diff --git a/link b/link\ndeleted file mode 120000\n--- a/link\n+++ /dev/null\n@@ -1 +0,0 @@\n-a.txt\n",
			"diff --git a/bin2.dat b/bin2.dat\nnew file mode 100644\n",
		} {
			if !strings.Contains(res.Diff, want) {
				t.Errorf("diff lacks\n%s\nin\n%s", want, res.Diff)
			}
		}
		var files []string
		for _, f := range res.Files {
			files = append(files, f.Path+":"+f.Status+":"+f.Kind)
		}
		if got := strings.Join(files, " "); got != "a.txt:modified:file bin.dat:deleted:file bin2.dat:added:file link:deleted:symlink" {
			t.Errorf("files %s", got)
		}
		// Against the current files: turn 3 added b.txt.
		res = diffResult{}
		if err := c.Call(ctx, "checkpoint.diff", map[string]any{"sessionId": id, "from": endTwo.CheckpointID}, &res); err != nil {
			t.Fatal(err)
		}
		if want := "diff --git a/b.txt b/b.txt\nnew file mode 100644\n--- /dev/null\n+++ b/b.txt\n@@ -0,0 +1 @@\n+new\n"; res.Diff != want {
			t.Errorf("diff against the current files\n%s\nwant\n%s", res.Diff, want)
		}
	})

	t.Run("restore", func(t *testing.T) {
		var res struct {
			CheckpointID string `json:"checkpointId"`
			Written      int    `json:"written"`
			Removed      int    `json:"removed"`
			Kept         []struct{ Path, Reason string }
		}
		if err := c.Call(ctx, "checkpoint.restore", map[string]any{"sessionId": id, "checkpointId": endOne.CheckpointID}, &res); err != nil {
			t.Fatal(err)
		}
		if got := readFileString(t, filepath.Join(wd, "a.txt")); got != "alpha\nbeta\n" {
			t.Errorf("a.txt restored as %q", got)
		}
		if got := readFileString(t, filepath.Join(wd, "bin.dat")); got != "P\x00\x01\xff" {
			t.Errorf("bin.dat restored as %q", got)
		}
		if target, err := os.Readlink(filepath.Join(wd, "link")); err != nil || target != "a.txt" {
			t.Errorf("link restored as %q (%v), want a symlink to a.txt", target, err)
		}
		for _, gone := range []string{"b.txt", "bin2.dat"} {
			if _, err := os.Lstat(filepath.Join(wd, gone)); !os.IsNotExist(err) {
				t.Errorf("%s still there after the restore: %v", gone, err)
			}
		}
		if got := readFileString(t, filepath.Join(wd, "node_modules/m.js")); got != "m\n" {
			t.Errorf("the ignored node_modules/m.js is %q", got)
		}
		if fi, err := os.Stat(filepath.Join(wd, "big.bin")); err != nil || fi.Size() != 3000 {
			t.Errorf("the skipped big.bin after the restore: %v, %v", fi, err)
		}
		if len(res.Kept) != 2 || res.CheckpointID == "" || res.Written == 0 || res.Removed == 0 {
			t.Errorf("restore answered %+v", res)
		}
		ev := collect(t, c.Events(id), "checkpoint", 1)
		if p := payloadOf(ev[len(ev)-1]); p["reason"] != "restore" || p["restoredFrom"] != endOne.CheckpointID || p["checkpointId"] != res.CheckpointID {
			t.Errorf("restore's checkpoint event %v", p)
		}

		// Changed outside the session: refused with the diff, unless force.
		if err := os.WriteFile(filepath.Join(wd, "a.txt"), []byte("outside\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := c.Call(ctx, "checkpoint.restore", map[string]any{"sessionId": id, "checkpointId": endTwo.CheckpointID}, nil)
		if err == nil || err.StringCode() != errcode.WorkspaceChanged || err.Code != -32000 {
			t.Fatalf("restore over an outside change: %v, want workspace_changed (-32000)", err)
		}
		if diff, _ := err.Data["diff"].(string); !strings.Contains(diff, "-alpha\n-beta\n+outside\n") {
			t.Errorf("workspace_changed carries diff %q", diff)
		}
		if err.Data["paths"] != "a.txt" || !strings.Contains(err.Message, "a.txt") {
			t.Errorf("workspace_changed names paths %q, message %q", err.Data["paths"], err.Message)
		}
		if got := readFileString(t, filepath.Join(wd, "a.txt")); got != "outside\n" {
			t.Errorf("a refused restore changed a.txt to %q", got)
		}
		if err := c.Call(ctx, "checkpoint.restore", map[string]any{"sessionId": id, "checkpointId": endTwo.CheckpointID, "force": true}, nil); err != nil {
			t.Fatalf("forced restore: %v", err)
		}
		if got := readFileString(t, filepath.Join(wd, "a.txt")); got != "alpha\ngamma\n" {
			t.Errorf("forced restore left a.txt %q", got)
		}
		if _, err := os.Lstat(filepath.Join(wd, "link")); !os.IsNotExist(err) {
			t.Errorf("link after restoring turn 2's end: %v", err)
		}
	})

	t.Run("delete", func(t *testing.T) {
		gone := list[1].CheckpointID
		if err := c.Call(ctx, "checkpoint.delete", map[string]any{"sessionId": id, "checkpointId": gone}, nil); err != nil {
			t.Fatal(err)
		}
		for _, cp := range listCheckpoints(t, c, id) {
			if cp.CheckpointID == gone {
				t.Errorf("checkpoint %s listed after its deletion", gone)
			}
		}
		err := c.Call(ctx, "checkpoint.delete", map[string]any{"sessionId": id, "checkpointId": gone}, nil)
		if err == nil || err.StringCode() != errcode.NotFound {
			t.Errorf("second delete: %v, want not_found", err)
		}
	})

	t.Run("busy", func(t *testing.T) {
		if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "slow turn"}, nil); err != nil {
			t.Fatal(err)
		}
		collect(t, c.Events(id), "turn.started", 1)
		err := c.Call(ctx, "checkpoint.restore", map[string]any{"sessionId": id, "checkpointId": endOne.CheckpointID}, nil)
		if err == nil || err.StringCode() != errcode.SessionBusy {
			t.Errorf("restore during a turn: %v, want session_busy", err)
		}
		if err := c.Call(ctx, "session.interrupt", map[string]any{"sessionId": id}, nil); err != nil {
			t.Fatal(err)
		}
		collect(t, c.Events(id), "turn.done", 1)
	})

	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			method string
			params map[string]any
			want   string
		}{
			{"checkpoint.list", map[string]any{"sessionId": "s-none"}, errcode.NotFound},
			{"checkpoint.diff", map[string]any{"sessionId": "s-none", "from": endOne.CheckpointID}, errcode.NotFound},
			{"checkpoint.restore", map[string]any{"sessionId": "s-none", "checkpointId": endOne.CheckpointID}, errcode.NotFound},
			{"checkpoint.delete", map[string]any{"sessionId": "s-none", "checkpointId": endOne.CheckpointID}, errcode.NotFound},
			{"checkpoint.diff", map[string]any{"sessionId": id, "from": "c-none"}, errcode.NotFound},
			{"checkpoint.diff", map[string]any{"sessionId": id, "from": endOne.CheckpointID, "to": "c-none"}, errcode.NotFound},
			{"checkpoint.restore", map[string]any{"sessionId": id, "checkpointId": "c-none"}, errcode.NotFound},
			{"checkpoint.delete", map[string]any{"sessionId": id, "checkpointId": "c-none"}, errcode.NotFound},
			{"checkpoint.diff", map[string]any{"sessionId": id}, errcode.InvalidParams},
			{"checkpoint.restore", map[string]any{"sessionId": id}, errcode.InvalidParams},
			{"checkpoint.delete", map[string]any{"sessionId": id}, errcode.InvalidParams},
			{"checkpoint.list", map[string]any{}, errcode.InvalidParams},
			{"checkpoint.list", map[string]any{"sessionId": id, "bogus": 1}, errcode.InvalidParams},
			{"checkpoint.restore", map[string]any{"sessionId": id, "checkpointId": endOne.CheckpointID, "force": "yes"}, errcode.InvalidParams},
		} {
			err := c.Call(ctx, tc.method, tc.params, nil)
			if err == nil || err.StringCode() != tc.want {
				t.Errorf("%s %v: %v, want %s", tc.method, tc.params, err, tc.want)
			}
		}
	})
}

// TestCheckpointQuota: a checkpoint that would pass the session's quota is
// not recorded; an error event with checkpoint_quota_exceeded says so and
// the turn completes.
func TestCheckpointQuota(t *testing.T) {
	ctx := context.Background()
	d := startDaemonScript(t, t.TempDir(), daemon.Config{CheckpointQuotaMB: 1}, checkpointScript)
	c := helloWS(t, d)
	var created struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.Call(ctx, "session.create", map[string]any{"workdir": t.TempDir(), "mode": "auto"}, &created); err != nil {
		t.Fatal(err)
	}
	evs := runTurn(t, c, created.SessionID, "big turn")
	var quota map[string]any
	for _, e := range evs {
		if p := payloadOf(e); e["kind"] == "error" && p["code"] == errcode.CheckpointQuotaExceeded {
			quota = p
		}
	}
	if quota == nil {
		t.Fatalf("no checkpoint_quota_exceeded error event: %v", eventKinds(evs))
	}
	list := listCheckpoints(t, c, created.SessionID)
	if len(list) != 1 || list[0].Reason != "tool" {
		raw, _ := json.Marshal(list)
		t.Errorf("checkpoints %s, want only the one before the shell call", raw)
	}
}

// TestCheckpointSkipsHugeAndIgnored: with the default bounds, a 200 MB
// file (sparse: nothing of it is read) and an ignored node_modules/ are
// not recorded but listed as skipped by checkpoint.list, with the file's
// size; the files beside them are recorded.
func TestCheckpointSkipsHugeAndIgnored(t *testing.T) {
	ctx := context.Background()
	const script = `{"steps":[
 {"match":"huge","tool_calls":[{"name":"shell","arguments":{"command":"printf 'node_modules/\\n' > .gitignore && truncate -s 200M huge.bin && mkdir -p node_modules/pkg && echo 'x' > node_modules/pkg/i.js && echo kept > kept.txt"}}]},
 {"after_tool":"shell","text":"Done.","repeat":true}
]}`
	d := startDaemonScript(t, t.TempDir(), daemon.Config{}, script)
	c := helloWS(t, d)
	var created struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.Call(ctx, "session.create", map[string]any{"workdir": t.TempDir(), "mode": "auto"}, &created); err != nil {
		t.Fatal(err)
	}
	runTurn(t, c, created.SessionID, "huge")
	list := listCheckpoints(t, c, created.SessionID)
	if len(list) == 0 {
		t.Fatal("no checkpoint after the turn")
	}
	last := list[len(list)-1]
	skipped := map[string]string{}
	var hugeSize int64
	for _, s := range last.Skipped {
		skipped[s.Path] = s.Reason
		if s.Path == "huge.bin" {
			hugeSize = s.Size
		}
	}
	if skipped["huge.bin"] != "too_large" || hugeSize != 200<<20 {
		t.Errorf("huge.bin skipped as %q with size %d, want too_large with %d", skipped["huge.bin"], hugeSize, 200<<20)
	}
	if skipped["node_modules"] != "ignored" {
		t.Errorf("node_modules not skipped as ignored: %v", skipped)
	}
	if last.Files < 2 { // .gitignore and kept.txt
		t.Errorf("the last checkpoint records %d files, want at least .gitignore and kept.txt", last.Files)
	}
}
