package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// opCaller makes a call with an operation id ("" for none) over one
// transport.
type opCaller func(method string, params map[string]any, op string, result any) *errcode.Error

// opCallers returns a caller per transport of d: WebSocket (the param
// operationId), gRPC (the metadata idempotency-key) and REST (the header
// Idempotency-Key).
func opCallers(t *testing.T, d *daemon.Daemon) map[string]opCaller {
	ws := helloWS(t, d)
	g := dialGRPC(t, d)
	return map[string]opCaller{
		"ws": func(method string, params map[string]any, op string, result any) *errcode.Error {
			p := maps.Clone(params)
			if op != "" {
				p["operationId"] = op
			}
			return ws.Call(context.Background(), method, p, result)
		},
		"grpc": func(method string, params map[string]any, op string, result any) *errcode.Error {
			ctx := context.Background()
			if op != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", op)
			}
			return g.Call(ctx, method, params, result)
		},
		"rest": func(method string, params map[string]any, op string, result any) *errcode.Error {
			return restOp(d.HTTPPort(), d.Token(), method, params, op, result)
		},
	}
}

// restOp POSTs method's params to its REST route with the operation id as
// the Idempotency-Key header.
func restOp(port int, token, method string, params map[string]any, op string, result any) *errcode.Error {
	body, _ := json.Marshal(params)
	req, err := http.NewRequest("POST", fmt.Sprintf("http://127.0.0.1:%d/v1/%s", port, strings.ReplaceAll(method, ".", "/")), bytes.NewReader(body))
	if err != nil {
		return errcode.New(errcode.Internal, "%v", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if op != "" {
		req.Header.Set("Idempotency-Key", op)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return errcode.New(errcode.Internal, "%v", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return errcode.New(errcode.Internal, "%v", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e errcode.Error
		if err := json.Unmarshal(out, &e); err != nil {
			return errcode.New(errcode.Internal, "HTTP %d: %s", resp.StatusCode, out)
		}
		return &e
	}
	if result != nil {
		if err := json.Unmarshal(out, result); err != nil {
			return errcode.New(errcode.Internal, "decode %s: %v", out, err)
		}
	}
	return nil
}

// sessionsIn counts the sessions of workdir.
func sessionsIn(t *testing.T, c client, workdir string) int {
	t.Helper()
	var res struct {
		Sessions []struct{} `json:"sessions"`
	}
	if err := c.Call(context.Background(), "session.list", map[string]any{"workdir": workdir}, &res); err != nil {
		t.Fatalf("session.list: %v", err)
	}
	return len(res.Sessions)
}

// turnsOf waits until every turn of the session (started or queued) is
// done and returns their ids; every prompt answered before the call is
// among them.
func turnsOf(t *testing.T, c client, sessionID string) map[string]bool {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		turns, done := map[string]bool{}, map[string]bool{}
		for after, more := int64(0), true; more; {
			var res struct {
				Events []map[string]any `json:"events"`
				More   bool             `json:"more"`
			}
			if err := c.Call(context.Background(), "session.resume", map[string]any{"sessionId": sessionID, "afterSeq": after}, &res); err != nil {
				t.Fatalf("session.resume: %v", err)
			}
			for _, ev := range res.Events {
				switch ev["kind"] {
				case "turn.started", "turn.queued":
					turns[payloadOf(ev)["turnId"].(string)] = true
				case "turn.done":
					done[payloadOf(ev)["turnId"].(string)] = true
				}
				after = seqOf(ev)
			}
			more = res.More && len(res.Events) > 0
		}
		if len(done) == len(turns) {
			return turns
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s: %d turns, %d done after 60 s", sessionID, len(turns), len(done))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestOperationReceipts(t *testing.T) {
	d := startDaemon(t)
	callers := opCallers(t, d)
	check := dialGRPC(t, d)
	var hello struct {
		Limits struct {
			OperationWindowMs int64 `json:"operationWindowMs"`
		} `json:"limits"`
	}
	if err := callers["rest"]("system.hello", map[string]any{"token": d.Token(), "clientVersion": "t", "protocolVersion": "1.0.0"}, "", &hello); err != nil {
		t.Fatal(err)
	}
	if hello.Limits.OperationWindowMs != (24 * time.Hour).Milliseconds() {
		t.Errorf("hello limits.operationWindowMs = %d, want 24 h", hello.Limits.OperationWindowMs)
	}
	for name, call := range callers {
		t.Run(name, func(t *testing.T) {
			wd := t.TempDir()
			create := map[string]any{"workdir": wd, "mode": "auto"}
			var s1, s2 struct {
				SessionID string `json:"sessionId"`
			}
			op := "create-" + name
			if err := call("session.create", create, op, &s1); err != nil {
				t.Fatal(err)
			}
			if err := call("session.create", create, op, &s2); err != nil {
				t.Fatal(err)
			}
			if s1.SessionID == "" || s2.SessionID != s1.SessionID {
				t.Fatalf("repeat of session.create answered %q, the first %q", s2.SessionID, s1.SessionID)
			}
			if n := sessionsIn(t, check, wd); n != 1 {
				t.Fatalf("%d sessions in the workdir after a create and its repeat, want 1", n)
			}
			// The same id with other params (or another method) does nothing.
			other := map[string]any{"workdir": wd, "mode": "plan"}
			wantCode(t, call("session.create", other, op, nil), errcode.InvalidParams, "other params")
			wantCode(t, call("session.close", map[string]any{"sessionId": s1.SessionID}, op, nil), errcode.InvalidParams, "session.create")
			if n := sessionsIn(t, check, wd); n != 1 {
				t.Fatalf("%d sessions after refused repeats, want 1", n)
			}

			// A prompt and its repeat: one turn, the same turn id.
			prompt := map[string]any{"sessionId": s1.SessionID, "text": "hello"}
			var t1, t2 struct {
				TurnID string `json:"turnId"`
			}
			if err := call("session.prompt", prompt, "prompt-"+name, &t1); err != nil {
				t.Fatal(err)
			}
			if err := call("session.prompt", prompt, "prompt-"+name, &t2); err != nil {
				t.Fatal(err)
			}
			if t1.TurnID == "" || t2.TurnID != t1.TurnID {
				t.Fatalf("repeat of session.prompt answered turn %q, the first %q", t2.TurnID, t1.TurnID)
			}
			if n := len(turnsOf(t, check, s1.SessionID)); n != 1 {
				t.Fatalf("%d turns after a prompt and its repeat, want 1", n)
			}
			// Without an operation id a repeat acts again.
			if err := call("session.prompt", prompt, "", nil); err != nil {
				t.Fatal(err)
			}
			if n := len(turnsOf(t, check, s1.SessionID)); n != 2 {
				t.Fatalf("%d turns after a prompt without operation id, want 2", n)
			}

			// An error is an outcome too: the repeat answers it again.
			missing := map[string]any{"sessionId": "s-missing"}
			first := call("session.interrupt", missing, "missing-"+name, nil)
			wantCode(t, first, errcode.NotFound, "")
			again := call("session.interrupt", missing, "missing-"+name, nil)
			wantCode(t, again, errcode.NotFound, "")
			if again.Message != first.Message {
				t.Errorf("repeated error %q, first %q", again.Message, first.Message)
			}

			// session_busy did nothing and says to try later: it is not
			// kept, so the same id acts once the session is free.
			if err := call("session.prompt", map[string]any{"sessionId": s1.SessionID, "text": "slow"}, "", nil); err != nil {
				t.Fatal(err)
			}
			busy := map[string]any{"sessionId": s1.SessionID, "text": "hello", "whenBusy": "reject"}
			wantCode(t, call("session.prompt", busy, "busy-"+name, nil), errcode.SessionBusy, "")
			if err := call("session.interrupt", map[string]any{"sessionId": s1.SessionID}, "", nil); err != nil {
				t.Fatal(err)
			}
			var t3 struct {
				TurnID string `json:"turnId"`
			}
			if err := call("session.prompt", busy, "busy-"+name, &t3); err != nil || t3.TurnID == "" {
				t.Fatalf("the retry of a session_busy prompt with its operation id, the session idle: %v %+v", err, t3)
			}

			wantCode(t, call("session.create", create, "has space", nil), errcode.InvalidParams, "operation id")
			wantCode(t, call("session.create", create, strings.Repeat("x", store.MaxOperationIDLen+1), nil), errcode.InvalidParams, "operation id")
		})
	}

	// operationId is a param of the mutating methods only.
	ws := helloWS(t, d)
	wantCode(t, ws.Call(context.Background(), "session.list", map[string]any{"operationId": "x"}, nil), errcode.InvalidParams, "operationId")
	wantCode(t, ws.Call(context.Background(), "session.create", map[string]any{"operationId": 7}, nil), errcode.InvalidParams, "operationId must be a string")
}

// TestOperationReceiptsConcurrent: duplicates sent at once over every
// transport act once, and every caller gets the same outcome.
func TestOperationReceiptsConcurrent(t *testing.T) {
	d := startDaemon(t)
	check := dialGRPC(t, d)
	var callers []opCaller
	for range 3 {
		for _, c := range opCallers(t, d) {
			callers = append(callers, c)
		}
	}
	wd := t.TempDir()
	ids := allAtOnce(t, callers, "session.create", map[string]any{"workdir": wd, "mode": "auto"}, "concurrent-create", "sessionId")
	if n := sessionsIn(t, check, wd); n != 1 {
		t.Fatalf("%d sessions after %d concurrent duplicates, want 1", n, len(callers))
	}
	allAtOnce(t, callers, "session.prompt", map[string]any{"sessionId": ids[0], "text": "hello"}, "concurrent-prompt", "turnId")
	if n := len(turnsOf(t, check, ids[0])); n != 1 {
		t.Fatalf("%d turns after %d concurrent duplicate prompts, want 1", n, len(callers))
	}
}

// TestOperationReceiptsExpire: after the window a repeat acts again.
func TestOperationReceiptsExpire(t *testing.T) {
	d := startDaemonWith(t, daemon.Config{OperationWindow: 50 * time.Millisecond})
	check := dialGRPC(t, d)
	for name, call := range opCallers(t, d) {
		t.Run(name, func(t *testing.T) {
			wd := t.TempDir()
			create := map[string]any{"workdir": wd}
			var first struct {
				SessionID string `json:"sessionId"`
			}
			if err := call("session.create", create, "expiring-"+name, &first); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				var r struct {
					SessionID string `json:"sessionId"`
				}
				if err := call("session.create", create, "expiring-"+name, &r); err != nil {
					t.Fatal(err)
				}
				if r.SessionID != first.SessionID {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("a repeat 30 s after the first call, with a 50 ms window, still answered the stored outcome")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if n := sessionsIn(t, check, wd); n != 2 {
				t.Fatalf("%d sessions after a repeat past the window, want 2", n)
			}
		})
	}
}

// losingStore drops the outcome of operations whose id starts with
// "lose-", as a daemon killed between acting and storing the outcome does.
type losingStore struct{ store.Store }

func (s losingStore) FinishReceipt(ctx context.Context, principalID, operationID, runner, code string, outcome []byte) error {
	if strings.HasPrefix(operationID, "lose-") {
		return errors.New("the daemon died before storing the outcome")
	}
	return s.Store.FinishReceipt(ctx, principalID, operationID, runner, code, outcome)
}

// TestOperationOutcomeUnknown: a repeat of a call whose outcome was never
// stored answers operation_outcome_unknown with what is known, on the
// daemon that acted and after its restart; it never acts again.
func TestOperationOutcomeUnknown(t *testing.T) {
	home := t.TempDir()
	undo := daemon.WrapStoreForTest(home, func(st store.Store) store.Store { return losingStore{st} })
	defer undo()
	start := func() *daemon.Daemon {
		d, err := daemon.Start(context.Background(), daemon.Config{Home: home, Provider: "fake:" + scriptIn(t, home)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
		return d
	}
	d := start()
	call := opCallers(t, d)["ws"]
	id := createSession(t, helloWS(t, d), map[string]any{"mode": "auto"})
	prompt := map[string]any{"sessionId": id, "text": "hello"}
	var first struct {
		TurnID string `json:"turnId"`
	}
	if err := call("session.prompt", prompt, "lose-1", &first); err != nil {
		t.Fatalf("the first call answers although its outcome was lost: %v", err)
	}
	wantUnknown := func(call opCaller, check client) {
		t.Helper()
		err := call("session.prompt", prompt, "lose-1", nil)
		wantCode(t, err, errcode.OperationOutcomeUnknown, `operation "lose-1" (session.prompt`)
		data := err.Data
		if data["operationId"] != "lose-1" || data["method"] != "session.prompt" || data["sessionId"] != id || data["startedAt"] == nil {
			t.Errorf("operation_outcome_unknown data = %v", data)
		}
		// It names the turn the call started.
		if data["turnId"] != first.TurnID {
			t.Errorf("operation_outcome_unknown data.turnId = %v, want the first call's turn %s", data["turnId"], first.TurnID)
		}
		if turns := turnsOf(t, check, id); len(turns) != 1 || !turns[first.TurnID] {
			t.Fatalf("turns %v, want the first call's one", turns)
		}
	}
	wantUnknown(call, dialGRPC(t, d))
	d.Stop()
	d = start()
	for _, call := range opCallers(t, d) {
		wantUnknown(call, dialGRPC(t, d))
	}
}

// scriptIn writes the test script into dir and returns its path.
func scriptIn(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "script.json")
	if err := os.WriteFile(path, []byte(testScript), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// allAtOnce makes the call through every caller at once, with one
// operation id, and checks that all got the same result field (a new id).
func allAtOnce(t *testing.T, callers []opCaller, method string, params map[string]any, op, field string) []string {
	t.Helper()
	got := make([]string, len(callers))
	var wg sync.WaitGroup
	for i, call := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r map[string]any
			if err := call(method, params, op, &r); err != nil {
				t.Error(err)
			}
			got[i], _ = r[field].(string)
		}()
	}
	wg.Wait()
	for _, id := range got {
		if id == "" || id != got[0] {
			t.Fatalf("concurrent duplicates of %s answered %s %v, want one", method, field, got)
		}
	}
	return got
}

// slowSummaryScript: a compaction's summary takes the model 3 s, time for
// the test to kill the daemon that forwarded the call meanwhile.
const slowSummaryScript = `{"steps":[{"match":"summarise the conversation","text":"a summary","delaySec":3}],"default":{"text":"hi"},"repeat":true}`

// TestPostgresReceiptKeptByOwner: a session.compact with an operation id
// goes to a daemon that forwards it to the session's owner, and that
// receiving daemon is killed with SIGKILL while the owner compacts. The
// receipt is kept where the call acts, the owner: the repeat answers the
// compaction's outcome (not operation_outcome_unknown), and the session
// compacted once.
func TestPostgresReceiptKeptByOwner(t *testing.T) {
	dsn := pgtest.FreshDatabase(t, pgtest.Server(t))
	procs := make([]*proc, 2)
	for i := range procs {
		home := t.TempDir()
		if err := os.WriteFile(filepath.Join(home, "script.json"), []byte(slowSummaryScript), 0o600); err != nil {
			t.Fatal(err)
		}
		procs[i] = runClusterProc(t, home, dsn)
	}
	owner := dialInfo(t, procs[0].info)
	id := createSession(t, owner, nil) // daemon 0 owns it
	for range 2 {                      // two user turns: compaction summarises the first
		if err := owner.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	collect(t, owner.Events(id), "turn.done", 2)

	op := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", "compact-via-receiver")
	compact := map[string]any{"sessionId": id}
	receiver := dialInfo(t, procs[1].info)
	go func() { _ = receiver.Call(op, "session.compact", compact, nil) }()
	collect(t, owner.Events(id), "compaction.started", 1)
	procs[1].kill()

	var got map[string]any
	if err := owner.Call(op, "session.compact", compact, &got); err != nil {
		t.Fatalf("the repeat on the owner after the receiving daemon died: %v", err)
	}
	var done []map[string]any
	for _, ev := range resumeAll(t, owner, id) {
		if ev["kind"] == "compaction" {
			done = append(done, payloadOf(ev))
		}
	}
	if len(done) != 1 {
		t.Fatalf("%d compaction events, want 1", len(done))
	}
	for _, k := range []string{"before", "after", "summaryChars"} {
		if fmt.Sprint(got[k]) != fmt.Sprint(done[0][k]) || got["summaryChars"] == nil {
			t.Fatalf("the repeat answered %v; the log's compaction is %v", got, done[0])
		}
	}
}

// resumeAll returns every stored event of the session.
func resumeAll(t *testing.T, c client, sessionID string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for after, more := int64(0), true; more; {
		var res struct {
			Events []map[string]any `json:"events"`
			More   bool             `json:"more"`
		}
		if err := c.Call(context.Background(), "session.resume", map[string]any{"sessionId": sessionID, "afterSeq": after}, &res); err != nil {
			t.Fatalf("session.resume: %v", err)
		}
		for _, ev := range res.Events {
			out = append(out, ev)
			after = seqOf(ev)
		}
		more = res.More && len(res.Events) > 0
	}
	return out
}
