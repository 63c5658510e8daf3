package e2e

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/provider/providertest"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TestRewindThenPromptModelHistory: what the model receives after
// session.rewind and session.fork, read at a local server speaking
// OpenAI's format. A session runs three turns (the first writes a file
// through a tool call); forked at the end of turn one or two, the fork's
// first request carries the original's messages up to that point and the
// fork's prompt; rewound to the end of turn one, the session's next
// request carries turn one's messages and the new prompt, nothing of turns
// two and three; the log keeps every earlier event, unchanged, and a
// session.rewound event marks turns two and three as rewound.
func TestRewindThenPromptModelHistory(t *testing.T) {
	testRewindThenPromptModelHistory(t, daemon.Config{})
}

// TestRewindThenPromptModelHistoryPostgres is
// TestRewindThenPromptModelHistory on a PostgreSQL store
// (TRELLIS_TEST_POSTGRES, a fresh schema).
func TestRewindThenPromptModelHistoryPostgres(t *testing.T) {
	testRewindThenPromptModelHistory(t, daemon.Config{Store: pgtest.FreshSchema(t, pgtest.Server(t))})
}

func testRewindThenPromptModelHistory(t *testing.T, cfg daemon.Config) {
	ctx := context.Background()
	srv := providertest.NewServer(t)
	for _, k := range providerEnv {
		t.Setenv(k, "")
	}
	t.Setenv("OPENAI_API_KEY", "sk-rewind")
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
	cfg.Home = t.TempDir()
	d, err := daemon.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	c := helloWS(t, d)
	id := createSession(t, c, map[string]any{"mode": "auto", "workdir": t.TempDir()})

	text := func(s string) providertest.Reply {
		return providertest.NewOpenAIStream("gpt-4.1").Text(s).Finish("stop").Usage(20, 2).Reply()
	}
	// messagesOf runs fn, which makes one turn of one model request (or,
	// for turn one, two), and returns the messages of each request the
	// model server received meanwhile.
	messagesOf := func(fn func()) [][]any {
		t.Helper()
		before := len(srv.Requests())
		fn()
		var out [][]any
		for _, r := range srv.Requests()[before:] {
			m, _ := r.JSON()["messages"].([]any)
			if len(m) == 0 {
				t.Fatalf("a model request without messages: %s", r.Body)
			}
			out = append(out, m)
		}
		return out
	}

	srv.Enqueue(providertest.NewOpenAIStream("gpt-4.1").ToolCall(0, "call-1", "write_file").
		ToolArgs(0, `{"path": "a.txt", "content": "one\n"}`).Finish("tool_calls").Usage(20, 5).Reply(),
		text("Wrote a.txt."), text("Answer two."), text("Answer three."))
	var evs []map[string]any
	var turnEnds []int64
	var firstOf [][]any // the first request's messages of each turn
	for _, p := range []string{"prompt one", "prompt two", "prompt three"} {
		reqs := messagesOf(func() {
			evs = append(evs, runTurn(t, c, id, p)...)
		})
		turnEnds = append(turnEnds, seqOf(evs[len(evs)-1]))
		firstOf = append(firstOf, reqs[0])
	}
	if n := len(srv.Requests()); n != 4 {
		t.Fatalf("three turns made %d model requests, want 4", n)
	}
	last := seqOf(evs[len(evs)-1])
	// The history at the end of turn N is what turn N+1's first request
	// sent before its prompt (its last message).
	historyAt := func(turn int) []any {
		m := firstOf[turn]
		return m[:len(m)-1]
	}
	userMessage := func(m []any, text string) {
		t.Helper()
		msg, _ := m[len(m)-1].(map[string]any)
		if msg["role"] != "user" || msg["content"] != text {
			t.Fatalf("the request's last message is %v, want the user's %q", msg, text)
		}
	}
	userMessage(firstOf[1], "prompt two")
	if len(historyAt(2)) <= len(historyAt(1)) {
		t.Fatalf("turn two added nothing to the history: %d then %d messages", len(historyAt(1)), len(historyAt(2)))
	}

	// nonSystem is m without its system messages: a fork works in another
	// directory, which its system prompt names (the history a fork or a
	// rewind answers the length of holds no system message).
	nonSystem := func(m []any) []any {
		var out []any
		for _, x := range m {
			if msg, _ := x.(map[string]any); msg["role"] != "system" {
				out = append(out, x)
			}
		}
		return out
	}
	for turn := 1; turn <= 2; turn++ {
		var f forked
		if err := c.Call(ctx, "session.fork", map[string]any{"sessionId": id, "atSeq": turnEnds[turn-1]}, &f); err != nil {
			t.Fatalf("fork at the end of turn %d: %v", turn, err)
		}
		srv.Enqueue(text("Forked answer."))
		reqs := messagesOf(func() { runTurn(t, c, f.SessionID, "forked prompt") })
		if len(reqs) != 1 {
			t.Fatalf("the fork's turn made %d model requests, want 1", len(reqs))
		}
		got := reqs[0]
		userMessage(got, "forked prompt")
		if want := nonSystem(historyAt(turn)); !reflect.DeepEqual(nonSystem(got[:len(got)-1]), want) || f.Messages != len(want) {
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(want)
			t.Fatalf("the first request of a fork at the end of turn %d (seq %d; answered messages %d) carries\n%s\nwant the original's history then\n%s", turn, turnEnds[turn-1], f.Messages, gj, wj)
		}
	}

	// Rewind to the end of turn one, then prompt.
	var rw struct {
		Seq      int64 `json:"seq"`
		Messages int   `json:"messages"`
	}
	if err := c.Call(ctx, "session.rewind", map[string]any{"sessionId": id, "atSeq": turnEnds[0]}, &rw); err != nil {
		t.Fatal(err)
	}
	srv.Enqueue(text("Answer after the rewind."))
	reqs := messagesOf(func() { runTurn(t, c, id, "prompt after the rewind") })
	if len(reqs) != 1 {
		t.Fatalf("the turn after the rewind made %d model requests, want 1", len(reqs))
	}
	got := reqs[0]
	userMessage(got, "prompt after the rewind")
	if want := historyAt(1); !reflect.DeepEqual(got[:len(got)-1], want) || rw.Messages != len(nonSystem(want)) {
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		t.Fatalf("the first request after the rewind (answered messages %d) carries\n%s\nwant turn one's history then the prompt:\n%s", rw.Messages, gj, wj)
	}

	// The log: every event of the three turns, unchanged, then the
	// session.rewound event marking turns two and three, then the new turn.
	log := resumeEvents(t, c, id)
	for i, e := range log {
		if seqOf(e) != int64(i+1) {
			t.Fatalf("the log's event %d has seq %d", i, seqOf(e))
		}
	}
	if len(log) <= len(evs) {
		t.Fatalf("the log has %d events, the three turns alone had %d", len(log), len(evs))
	}
	for i, e := range evs {
		if log[i]["kind"] != e["kind"] || !reflect.DeepEqual(payloadOf(log[i]), payloadOf(e)) {
			t.Fatalf("the log's event %d is %v %v after the rewind, was %v %v", i+1, log[i]["kind"], payloadOf(log[i]), e["kind"], payloadOf(e))
		}
	}
	var marks []map[string]any
	for _, e := range log {
		if e["kind"] == "session.rewound" {
			marks = append(marks, e)
		}
	}
	if len(marks) != 1 || seqOf(marks[0]) != rw.Seq || seqOf(marks[0]) != last+1 {
		t.Fatalf("session.rewound events %v, want one at seq %d (rewind answered %d)", marks, last+1, rw.Seq)
	}
	if p := payloadOf(marks[0]); p["toSeq"] != float64(turnEnds[0]) || p["fromSeq"] != float64(last) {
		t.Fatalf("session.rewound %v marks the wrong events: want toSeq %d (end of turn one), fromSeq %d (end of turn three)", p, turnEnds[0], last)
	}
	t.Logf("rewound seqs %d..%d of %d; the next request carried %d messages, turn one's %d and the prompt", turnEnds[0]+1, last, len(log), len(got), len(got)-1)
}
