package e2e

// The agent's questions (ask_user: question.request, question.list,
// question.respond, question.pending, question.resolved) as clients of
// snowpea 1.7.0 use them, after a protocol 1.7.0 hello: valid calls, a
// wrong type, an unknown id and an unknown field for each method.

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/protocol/errcode"
)

// questionScript's model asks the person with ask_user, then says what it
// was told.
const questionScript = `{"steps":[
 {"match":"ask me","tool_calls":[{"name":"ask_user","arguments":{"questions":[
   {"question":"Which colour should the button be?","header":"Colour","options":[{"label":"Blue","description":"the brand colour"},{"label":"Green"}]},
   {"question":"Which browsers must it support?","options":[{"label":"Firefox"},{"label":"Chrome"},{"label":"Safari"}],"multiple":true}]}}]},
 {"after_tool":"ask_user","text":"Thanks for the answers."},
 {"default":true,"text":"Default answer."}
],"repeat":true}`

// questioner answers question.request with reply and records what it was
// asked.
type questioner struct {
	mu    sync.Mutex
	asked []map[string]any
	reply any
	err   *errcode.Error
}

func (q *questioner) handle(method string, params json.RawMessage) (any, *errcode.Error) {
	var p map[string]any
	_ = json.Unmarshal(params, &p)
	q.mu.Lock()
	defer q.mu.Unlock()
	if method != "question.request" {
		return nil, errcode.NewMethodNotFound(method)
	}
	q.asked = append(q.asked, p)
	return q.reply, q.err
}

// askUserResult runs the "ask me" turn on c and returns ask_user's
// tool.result.
func askUserResult(t *testing.T, c *wsClient, prompt client, id string) map[string]any {
	t.Helper()
	if err := prompt.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": "ask me"}, nil); err != nil {
		t.Fatal(err)
	}
	res := findKind(collect(t, c.Events(id), "turn.done", 1), "tool.result")
	if len(res) != 1 {
		t.Fatalf("tool results %v, want ask_user's", res)
	}
	return res[0]
}

// TestCompat17QuestionInteractive: the agent's ask_user reaches the session's own
// client as question.request (after the turn's events), the client's
// answer (with a field this daemon does not know) is what the tool
// returns, and question.resolved tells every connection.
func TestCompat17QuestionInteractive(t *testing.T) {
	d := startDaemonScript(t, t.TempDir(), daemon.Config{}, questionScript)
	c := compatHello(t, d)
	q := &questioner{reply: map[string]any{"answers": []any{
		map[string]any{"values": []string{"Blue"}},
		map[string]any{"values": []string{"Firefox", "Safari"}},
	}, "remember": true}}
	c.onRequest = q.handle
	watcher := compatHello(t, d)
	id := createSession(t, c, nil)
	res := askUserResult(t, c, c, id)
	if res["ok"] != true || !strings.Contains(res["output"].(string), "A: Blue") || !strings.Contains(res["output"].(string), "A: Firefox, Safari") {
		t.Fatalf("ask_user's result: %v", res)
	}
	q.mu.Lock()
	asked := q.asked
	q.mu.Unlock()
	if len(asked) != 1 {
		t.Fatalf("asked %d times, want once", len(asked))
	}
	req := asked[0]
	qid, _ := req["questionId"].(string)
	qs, _ := req["questions"].([]any)
	if !strings.HasPrefix(qid, "q-") || req["sessionId"] != id || req["callId"] == "" || len(qs) != 2 {
		t.Fatalf("question.request params: %v", req)
	}
	first := qs[0].(map[string]any)
	opts := first["options"].([]any)
	if first["header"] != "Colour" || len(opts) != 2 || opts[0].(map[string]any)["label"] != "Blue" ||
		opts[0].(map[string]any)["description"] != "the brand colour" || qs[1].(map[string]any)["multiple"] != true {
		t.Fatalf("question.request questions: %v", qs)
	}
	resolved := waitNote(t, watcher, "question.resolved")
	if resolved["questionId"] != qid || resolved["outcome"] != "answered" || resolved["by"] == "" || resolved["by"] == "timeout" {
		t.Fatalf("question.resolved: %v", resolved)
	}
}

// TestCompat17QuestionClientCannotAnswer: a client that answers question.request
// with an error, or with answers that do not fit, declines the question:
// the agent is told and the turn goes on.
func TestCompat17QuestionClientCannotAnswer(t *testing.T) {
	for name, q := range map[string]*questioner{
		"error":        {err: errcode.NewMethodNotFound("question.request")},
		"wrong count":  {reply: map[string]any{"answers": []any{map[string]any{"values": []string{"Blue"}}}}},
		"two for one":  {reply: map[string]any{"answers": []any{map[string]any{"values": []string{"Blue", "Green"}}, map[string]any{"values": []string{"Chrome"}}}}},
		"wrong type":   {reply: map[string]any{"answers": "Blue"}},
		"declined":     {reply: map[string]any{"declined": true, "reason": "not now"}},
		"empty answer": {reply: map[string]any{"answers": []any{map[string]any{"values": []string{" "}}, map[string]any{"values": []string{"Chrome"}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			d := startDaemonScript(t, t.TempDir(), daemon.Config{}, questionScript)
			c := compatHello(t, d)
			c.onRequest = q.handle
			id := createSession(t, c, nil)
			res := askUserResult(t, c, c, id)
			out, _ := res["output"].(string)
			if res["ok"] != false || !strings.Contains(out, "declined") {
				t.Fatalf("ask_user's result: %v", res)
			}
			if name == "declined" && !strings.Contains(out, "not now") {
				t.Fatalf("ask_user's result %q does not carry the reason", out)
			}
		})
	}
}

// TestCompat17QuestionUnattended: with the session's client gone, the question
// waits in the unattended queue: question.pending tells the connections,
// question.list lists it (approval.list does not), question.respond checks
// its params and answers it once.
func TestCompat17QuestionUnattended(t *testing.T) {
	d := startDaemonScript(t, t.TempDir(), daemon.Config{}, questionScript)
	origin := compatHello(t, d)
	other := compatHello(t, d)
	ctx := context.Background()
	id := createSession(t, origin, nil)
	origin.Close()
	waitConnections(t, other, 1)
	if err := other.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "ask me"}, nil); err != nil {
		t.Fatal(err)
	}
	pending := waitNote(t, other, "question.pending")
	qid, _ := pending["question"].(map[string]any)["questionId"].(string)
	if qid == "" {
		t.Fatalf("question.pending: %v", pending)
	}
	var list struct {
		Questions []map[string]any `json:"questions"`
	}
	if err := other.Call(ctx, "question.list", map[string]any{"sessionId": id}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Questions) != 1 || list.Questions[0]["questionId"] != qid || list.Questions[0]["interactive"] != false {
		t.Fatalf("question.list: %v", list.Questions)
	}
	var approvals struct {
		Requests []map[string]any `json:"requests"`
	}
	if err := other.Call(ctx, "approval.list", map[string]any{"sessionId": id, "includeInteractive": true}, &approvals); err != nil || len(approvals.Requests) != 0 {
		t.Fatalf("approval.list: %v %v, want no questions in it", approvals.Requests, err)
	}
	for _, tc := range []struct {
		name   string
		method string
		params map[string]any
		code   string
	}{
		{"an approval's method", "approval.respond", map[string]any{"requestId": qid, "decision": "allow"}, "invalid_params"},
		{"no id", "question.respond", map[string]any{"answers": []any{}}, "invalid_params"},
		{"unknown id", "question.respond", map[string]any{"questionId": "q-unknown", "declined": true}, "not_found"},
		{"wrong type", "question.respond", map[string]any{"questionId": qid, "answers": "Blue"}, "invalid_params"},
		{"unknown field", "question.respond", map[string]any{"questionId": qid, "declined": true, "remember": true}, "invalid_params"},
		{"one answer for two questions", "question.respond", map[string]any{"questionId": qid, "answers": []any{map[string]any{"values": []string{"Blue"}}}}, "invalid_params"},
		{"answers and declined", "question.respond", map[string]any{"questionId": qid, "declined": true, "answers": []any{map[string]any{"values": []string{"Blue"}}}}, "invalid_params"},
		{"unknown session", "question.list", map[string]any{"sessionId": "s-unknown"}, "not_found"},
		{"list wrong type", "question.list", map[string]any{"sessionId": 7}, "invalid_params"},
		{"list unknown field", "question.list", map[string]any{"sessionId": id, "scope": "all"}, "invalid_params"},
	} {
		if err := other.Call(ctx, tc.method, tc.params, nil); err == nil || err.StringCode() != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	answer := map[string]any{"questionId": qid, "answers": []any{
		map[string]any{"values": []string{"a shade of teal"}}, map[string]any{"values": []string{"Chrome"}}}}
	if err := other.Call(ctx, "question.respond", answer, nil); err != nil {
		t.Fatalf("question.respond: %v", err)
	}
	resolved := waitNote(t, other, "question.resolved")
	if resolved["questionId"] != qid || resolved["outcome"] != "answered" {
		t.Fatalf("question.resolved: %v", resolved)
	}
	res := findKind(collect(t, other.Events(id), "turn.done", 1), "tool.result")
	if len(res) != 1 || res[0]["ok"] != true || !strings.Contains(res[0]["output"].(string), "A: a shade of teal") {
		t.Fatalf("ask_user's result: %v", res)
	}
	if err := other.Call(ctx, "question.respond", answer, nil); err == nil || err.StringCode() != "not_found" {
		t.Fatalf("a second answer: %v, want not_found", err)
	}
	if err := other.Call(ctx, "question.list", map[string]any{}, &list); err != nil || len(list.Questions) != 0 {
		t.Fatalf("question.list after the answer: %v %v", list.Questions, err)
	}
}
