package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// forkScript is a 5-turn session: it writes a text file, a binary file
// and a symlink, edits, deletes and renames files; its last turn only
// talks. Every step repeats, so that forks and rewinds can play them again.
const forkScript = `{"steps":[
 {"match":"turn one","repeat":true,"tool_calls":[
   {"name":"write_file","arguments":{"path":"a.txt","content":"alpha\nbeta\n"}},
   {"name":"shell","arguments":{"command":"printf 'P\\000\\001\\377' > bin.dat && ln -s a.txt link"}}]},
 {"match":"turn two","repeat":true,"tool_calls":[
   {"name":"edit_file","arguments":{"path":"a.txt","old":"beta","new":"gamma"}},
   {"name":"shell","arguments":{"command":"mkdir -p dir && printf 'c\\n' > dir/c.txt"}}]},
 {"match":"turn three","repeat":true,"tool_calls":[
   {"name":"shell","arguments":{"command":"rm dir/c.txt && mv bin.dat bin2.dat"}}]},
 {"match":"turn four","repeat":true,"tool_calls":[
   {"name":"write_file","arguments":{"path":"b.txt","content":"bee\n"}},
   {"name":"shell","arguments":{"command":"rm link && ln -s b.txt link"}}]},
 {"match":"turn five","repeat":true,"text":"Only words."},
 {"match":"slow turn","text":"slowly","delaySec":60},
 {"after_tool":"write_file","text":"Done.","repeat":true},
 {"after_tool":"edit_file","text":"Done.","repeat":true},
 {"after_tool":"shell","text":"Done.","repeat":true}
]}`

// files is a workdir's content: path → "d", "f:" + SHA-256, or "l:" + target.
type files map[string]string

func fileHash(b []byte) string {
	h := sha256.Sum256(b)
	return "f:" + hex.EncodeToString(h[:])
}

// forkStates are the workdir's contents after each tool call of forkScript,
// worked out from the script alone: states[n] holds after n calls.
func forkStates() []files {
	s := files{}
	var out []files
	step := func(f func()) {
		f()
		out = append(out, maps.Clone(s))
	}
	step(func() {})
	step(func() { s["a.txt"] = fileHash([]byte("alpha\nbeta\n")) })
	step(func() { s["bin.dat"], s["link"] = fileHash([]byte("P\x00\x01\xff")), "l:a.txt" })
	step(func() { s["a.txt"] = fileHash([]byte("alpha\ngamma\n")) })
	step(func() { s["dir"], s["dir/c.txt"] = "d", fileHash([]byte("c\n")) })
	step(func() {
		delete(s, "dir/c.txt")
		s["bin2.dat"] = s["bin.dat"]
		delete(s, "bin.dat")
	})
	step(func() { s["b.txt"] = fileHash([]byte("bee\n")) })
	step(func() { s["link"] = "l:b.txt" })
	return out
}

// readFiles walks dir the way a checkpoint sees it.
func readFiles(t *testing.T, dir string) files {
	t.Helper()
	out := files{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			out[rel] = "l:" + target
			return err
		case e.IsDir():
			out[rel] = "d"
		default:
			b, err := os.ReadFile(p)
			out[rel] = fileHash(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// openStore opens the daemon's store beside it: PostgreSQL when cfg names
// one, else the SQLite database in home.
func openStore(t *testing.T, cfg daemon.Config, home string) store.Store {
	t.Helper()
	var st store.Store
	var err error
	if strings.HasPrefix(cfg.Store, "postgres") {
		st, err = postgres.Open(context.Background(), cfg.Store)
	} else {
		st, err = sqlite.Open(filepath.Join(home, "trellis.db"))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// historyOf reads a session's stored model history, each message
// re-encoded so that both databases' JSON compare equal.
func historyOf(t *testing.T, st store.Store, id string) []string {
	t.Helper()
	raw, err := st.LoadHistory(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(raw))
	for i, m := range raw {
		var v any
		if err := json.Unmarshal(m, &v); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(v)
		out[i] = string(b)
	}
	return out
}

type forked struct {
	SessionID    string  `json:"sessionId"`
	Workdir      string  `json:"workdir"`
	CheckpointID *string `json:"checkpointId"`
	Messages     int     `json:"messages"`
}

// TestForkAndRewind: through the WebSocket, a 5-turn session that writes,
// edits, deletes and renames files (a binary file and a symlink among
// them) is forked at every seq of its log: each fork's workdir holds
// exactly the files the original had at that seq (worked out from the
// script and where its tool calls fall in the log), and its model history
// is the original's as it stood then: a prefix of the final one, empty
// before the first turn, whole after each turn. A rewind to the end of
// turn two puts the files and history back, keeps every event with a
// session.rewound marking the rewind, and the next prompt continues from
// the rewound history. Bad input answers documented codes.
func TestForkAndRewind(t *testing.T) { testForkAndRewind(t, daemon.Config{}) }

// TestForkAndRewindPostgres is TestForkAndRewind on a daemon whose store is
// PostgreSQL (TRELLIS_TEST_POSTGRES, a fresh schema).
func TestForkAndRewindPostgres(t *testing.T) {
	testForkAndRewind(t, daemon.Config{Store: pgtest.FreshSchema(t, pgtest.Server(t))})
}

func testForkAndRewind(t *testing.T, cfg daemon.Config) {
	ctx := context.Background()
	home := t.TempDir()
	d := startDaemonScript(t, home, cfg, forkScript)
	st := openStore(t, cfg, home)
	c := helloWS(t, d)
	wd := t.TempDir()
	var created struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.Call(ctx, "session.create", map[string]any{"workdir": wd, "mode": "auto"}, &created); err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	turns := []string{"turn one", "turn two", "turn three", "turn four", "turn five"}
	var evs []map[string]any
	var turnEnds []int64
	for _, text := range turns {
		evs = append(evs, runTurn(t, c, id, text)...)
		turnEnds = append(turnEnds, seqOf(evs[len(evs)-1]))
	}
	last := seqOf(evs[len(evs)-1])
	for i, e := range evs {
		if seqOf(e) != int64(i+1) {
			t.Fatalf("event %d has seq %d: the turns' events are not the whole log", i, seqOf(e))
		}
	}
	full := historyOf(t, st, id)
	// Each turn adds its prompt, the model's answer with its calls, one
	// result per call and the final answer; a turn without calls two.
	wantLens := []int{0}
	for _, calls := range []int{2, 2, 1, 2, 0} {
		n := 2
		if calls > 0 {
			n = 3 + calls
		}
		wantLens = append(wantLens, wantLens[len(wantLens)-1]+n)
	}
	if len(full) != wantLens[5] {
		t.Fatalf("the session's history has %d messages, want %d", len(full), wantLens[5])
	}

	// expectedAt: the files of the latest checkpoint at or before seq, a
	// checkpoint holding the state after the tool calls whose results come
	// before it.
	states := forkStates()
	cps := listCheckpoints(t, c, id)
	expectedAt := func(seq int64) files {
		want := files{}
		for _, cp := range cps {
			if cp.Seq > seq {
				break
			}
			n := 0
			for _, e := range evs {
				if e["kind"] == "tool.result" && seqOf(e) < cp.Seq {
					n++
				}
			}
			want = states[n]
		}
		return want
	}
	if got, want := readFiles(t, wd), states[len(states)-1]; !maps.Equal(got, want) {
		t.Fatalf("the session's workdir holds %v, want %v", got, want)
	}

	t.Run("fork at every seq", func(t *testing.T) {
		prevLen := 0
		for seq := int64(0); seq <= last; seq++ {
			var f forked
			if err := c.Call(ctx, "session.fork", map[string]any{"sessionId": id, "atSeq": seq}, &f); err != nil {
				t.Fatalf("fork at %d: %v", seq, err)
			}
			if got, want := readFiles(t, f.Workdir), expectedAt(seq); !maps.Equal(got, want) {
				t.Errorf("fork at %d holds %v, want %v", seq, got, want)
			}
			// The original's history at the seq, then a result for each
			// tool call it had not answered yet.
			h := historyOf(t, st, f.SessionID)
			if f.Messages > len(h) || f.Messages > len(full) || !slices.Equal(h[:f.Messages], full[:f.Messages]) {
				t.Errorf("fork at %d: its history (%d messages, answered %d) does not start with the original's", seq, len(h), f.Messages)
			}
			for _, m := range h[f.Messages:] {
				if !strings.Contains(m, `"role":"tool"`) || !strings.Contains(m, "not run: this session is a fork") {
					t.Errorf("fork at %d: added %s, want a result for an unanswered call", seq, m)
				}
			}
			if f.Messages < prevLen {
				t.Errorf("fork at %d has %d messages, fewer than at %d", seq, f.Messages, seq-1)
			}
			prevLen = f.Messages
			for i, end := range turnEnds {
				if seq == end && len(h) != wantLens[i+1] {
					t.Errorf("fork at the end of turn %d has %d messages, want %d", i+1, len(h), wantLens[i+1])
				}
				if seq == end-1 && i == 0 && len(h) == 0 {
					t.Errorf("fork inside turn 1 has no history")
				}
			}
			if seq < seqOf(evs[0]) && len(h) != 0 {
				t.Errorf("fork before the first event has %d messages", len(h))
			}
			os.RemoveAll(f.Workdir)
		}
	})

	t.Run("fork then prompt", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "new")
		var f forked
		if err := c.Call(ctx, "session.fork", map[string]any{"sessionId": id, "atSeq": turnEnds[1], "workdir": dir}, &f); err != nil {
			t.Fatal(err)
		}
		if f.Workdir != dir {
			t.Errorf("fork's workdir %s, want %s", f.Workdir, dir)
		}
		// The fork's log is the original's up to the seq, then its own
		// checkpoint of the files it was given.
		replay := resumeEvents(t, c, f.SessionID)
		if int64(len(replay)) != turnEnds[1]+1 || replay[len(replay)-1]["kind"] != "checkpoint" {
			t.Fatalf("the fork's log: %v", eventKinds(replay))
		}
		for i, e := range replay[:turnEnds[1]] {
			if e["kind"] != evs[i]["kind"] || seqOf(e) != seqOf(evs[i]) || !reflect.DeepEqual(payloadOf(e), payloadOf(evs[i])) {
				t.Fatalf("fork's event %d is %v at %d, the original's %v at %d", i, e["kind"], seqOf(e), evs[i]["kind"], seqOf(evs[i]))
			}
		}
		runTurn(t, c, f.SessionID, "turn three")
		h := historyOf(t, st, f.SessionID)
		if len(h) != wantLens[3] || !slices.Equal(h[:wantLens[2]], full[:wantLens[2]]) {
			t.Errorf("the fork's history after a turn: %d messages, want the original's first %d then turn three's", len(h), wantLens[2])
		}
		if got, want := readFiles(t, dir), states[5]; !maps.Equal(got, want) {
			t.Errorf("the fork's files after turn three %v, want %v", got, want)
		}
	})

	t.Run("rewind", func(t *testing.T) {
		to := turnEnds[1]
		var res struct {
			Seq          int64   `json:"seq"`
			CheckpointID *string `json:"checkpointId"`
			Messages     int     `json:"messages"`
		}
		if err := c.Call(ctx, "session.rewind", map[string]any{"sessionId": id, "atSeq": to}, &res); err != nil {
			t.Fatal(err)
		}
		if got, want := readFiles(t, wd), expectedAt(to); !maps.Equal(got, want) {
			t.Errorf("rewound files %v, want %v", got, want)
		}
		if h := historyOf(t, st, id); !slices.Equal(h, full[:wantLens[2]]) || res.Messages != wantLens[2] {
			t.Errorf("rewound history has %d messages (answered %d), want the first %d", len(h), res.Messages, wantLens[2])
		}
		rewound := collect(t, c.Events(id), "session.rewound", 1)
		ev := rewound[len(rewound)-1]
		p := payloadOf(ev)
		if seqOf(ev) != res.Seq || p["toSeq"] != float64(to) || p["fromSeq"] != float64(last) {
			t.Errorf("session.rewound at %d: %v, want toSeq %d fromSeq %d at %d", seqOf(ev), p, to, last, res.Seq)
		}
		after := runTurn(t, c, id, "turn five")
		h := historyOf(t, st, id)
		if len(h) != wantLens[2]+2 || !slices.Equal(h[:wantLens[2]], full[:wantLens[2]]) {
			t.Errorf("history after the rewind and a turn: %d messages, want the rewound %d and 2", len(h), wantLens[2])
		}
		if seqOf(after[0]) <= res.Seq {
			t.Errorf("the turn after the rewind starts at %d", seqOf(after[0]))
		}
		// The log kept every event, the rewound ones among them.
		log := resumeEvents(t, c, id)
		for i, e := range log {
			if seqOf(e) != int64(i+1) {
				t.Fatalf("the log's event %d has seq %d", i, seqOf(e))
			}
			if i < len(evs) && e["kind"] != evs[i]["kind"] {
				t.Errorf("the log's event %d is %v after the rewind, was %v", i, e["kind"], evs[i]["kind"])
			}
		}
		if len(log) < int(res.Seq)+len(after) {
			t.Errorf("the log has %d events, want at least %d", len(log), int(res.Seq)+len(after))
		}
	})

	t.Run("workspace changed", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(wd, "a.txt"), []byte("outside\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := c.Call(ctx, "session.rewind", map[string]any{"sessionId": id, "atSeq": turnEnds[0]}, nil)
		if err == nil || err.StringCode() != errcode.WorkspaceChanged {
			t.Fatalf("rewind over an outside change: %v, want workspace_changed", err)
		}
		if got := readFileString(t, filepath.Join(wd, "a.txt")); got != "outside\n" {
			t.Errorf("a refused rewind changed a.txt to %q", got)
		}
		if err := c.Call(ctx, "session.rewind", map[string]any{"sessionId": id, "atSeq": turnEnds[0], "force": true}, nil); err != nil {
			t.Fatalf("forced rewind: %v", err)
		}
		if got, want := readFiles(t, wd), expectedAt(turnEnds[0]); !maps.Equal(got, want) {
			t.Errorf("forced rewind left %v, want %v", got, want)
		}
	})

	t.Run("busy", func(t *testing.T) {
		if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "slow turn"}, nil); err != nil {
			t.Fatal(err)
		}
		collect(t, c.Events(id), "turn.started", 1)
		err := c.Call(ctx, "session.rewind", map[string]any{"sessionId": id, "atSeq": 1}, nil)
		if err == nil || err.StringCode() != errcode.SessionBusy {
			t.Errorf("rewind during a turn: %v, want session_busy", err)
		}
		if err := c.Call(ctx, "session.interrupt", map[string]any{"sessionId": id}, nil); err != nil {
			t.Fatal(err)
		}
		collect(t, c.Events(id), "turn.done", 1)
	})

	t.Run("bad input", func(t *testing.T) {
		full := t.TempDir()
		if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			method string
			params map[string]any
			want   string
		}{
			{"session.fork", map[string]any{"sessionId": "s-none", "atSeq": 1}, errcode.NotFound},
			{"session.rewind", map[string]any{"sessionId": "s-none", "atSeq": 1}, errcode.NotFound},
			{"session.fork", map[string]any{"sessionId": id, "atSeq": -1}, errcode.InvalidParams},
			{"session.rewind", map[string]any{"sessionId": id, "atSeq": -1}, errcode.InvalidParams},
			{"session.fork", map[string]any{"sessionId": id, "atSeq": 1 << 40}, errcode.InvalidParams},
			{"session.rewind", map[string]any{"sessionId": id, "atSeq": 1 << 40}, errcode.InvalidParams},
			{"session.fork", map[string]any{"sessionId": id, "atSeq": 1, "workdir": full}, errcode.InvalidParams},
			{"session.fork", map[string]any{"sessionId": id, "atSeq": "one"}, errcode.InvalidParams},
			{"session.fork", map[string]any{"atSeq": 1}, errcode.InvalidParams},
		} {
			err := c.Call(ctx, tc.method, tc.params, nil)
			if err == nil || err.StringCode() != tc.want {
				t.Errorf("%s %v: %v, want %s", tc.method, tc.params, err, tc.want)
			}
		}
		if got := readFiles(t, full); len(got) != 1 {
			t.Errorf("a refused fork changed the non-empty workdir: %v", got)
		}
	})
}

// resumeEvents returns a session's stored events (session.resume from the
// start).
func resumeEvents(t *testing.T, c *wsClient, id string) []map[string]any {
	t.Helper()
	var res struct {
		Events []map[string]any `json:"events"`
		More   bool             `json:"more"`
	}
	if err := c.Call(context.Background(), "session.resume", map[string]any{"sessionId": id}, &res); err != nil {
		t.Fatal(err)
	}
	if res.More {
		t.Fatalf("session.resume of %s truncated", id)
	}
	return res.Events
}
