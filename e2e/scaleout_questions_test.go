package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// TestPostgresScaleOutQuestions: the agent's questions across two daemons
// on one database, as approvals travel. A session runs on A; its origin's
// approver is attached to B: the question raised on A reaches B's
// approver, whose answer is what ask_user returns on A. Then a question of
// a session with no approver anywhere is seen pending by B's watcher,
// listed and answered on B, and A's turn goes on with that answer.
func TestPostgresScaleOutQuestions(t *testing.T) {
	_, procs := startCluster(t, 2)
	a, b := dialInfo(t, procs[0].info), dialInfo(t, procs[1].info)
	a.origin, b.origin = "origin-of-a", "origin-of-b"
	ctx := context.Background()

	approver := attachApprover(t, b)
	watchB := watchQueue(t, b)

	id := createSession(t, a, nil)
	if err := b.Call(ctx, "session.resume", map[string]any{"sessionId": id}, nil); err != nil {
		t.Fatalf("session.resume via B: %v", err)
	}
	evs := a.Events(id)
	if err := a.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "ask me"}, nil); err != nil {
		t.Fatal(err)
	}
	got := make(chan *trellisv1.QuestionRequest, 1)
	go func() {
		defer close(got)
		for {
			r, err := approver.Recv()
			if err != nil {
				return
			}
			if q := r.GetQuestion(); q != nil {
				got <- q
				return
			}
		}
	}()
	var q *trellisv1.QuestionRequest
	select {
	case q = <-got:
		if q == nil {
			t.Fatal("B's approver stream ended")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the question raised on A did not reach the approver attached to B")
	}
	if q.GetSessionId() != id || len(q.GetQuestions()) != 1 || !strings.HasPrefix(q.GetQuestionId(), "q-") {
		t.Fatalf("question %v", q)
	}
	approver.Send(&trellisv1.AttachRequest{Msg: &trellisv1.AttachRequest_Decision{Decision: &trellisv1.AttachDecision{
		RequestId: q.GetQuestionId(), Answer: &trellisv1.QuestionReply{Answers: []*trellisv1.QuestionAnswer{{Values: []string{"Green"}}}}}}})
	res := findKind(collect(t, evs, "turn.done", 1), "tool.result")
	if len(res) != 1 || res[0]["ok"] != true || !strings.Contains(res[0]["output"].(string), "A: Green") {
		t.Fatalf("ask_user's result on A: %v", res)
	}

	// Unattended: a session of A whose origin has no approver anywhere.
	id2 := createSession(t, a, nil)
	evs2 := a.Events(id2)
	if err := a.Call(ctx, "session.prompt", map[string]any{"sessionId": id2, "text": "ask me"}, nil); err != nil {
		t.Fatal(err)
	}
	var qid string
	deadline := time.After(20 * time.Second)
	for qid == "" {
		select {
		case m, ok := <-watchB:
			if !ok {
				t.Fatal("B's queue watch ended")
			}
			if p := m.GetQuestionPending().GetQuestion(); p.GetSessionId() == id2 {
				qid = p.GetQuestionId()
			}
		case <-deadline:
			t.Fatal("B's watcher saw no question.pending of A's session")
		}
	}
	var list struct {
		Questions []map[string]any `json:"questions"`
	}
	if err := b.Call(ctx, "question.list", map[string]any{"sessionId": id2}, &list); err != nil || len(list.Questions) != 1 || list.Questions[0]["questionId"] != qid {
		t.Fatalf("question.list on B: %v %v, want [%s]", list.Questions, err, qid)
	}
	if err := b.Call(ctx, "question.respond", map[string]any{"questionId": qid, "answers": []any{map[string]any{"values": []string{"Blue"}}}}, nil); err != nil {
		t.Fatalf("question.respond on B: %v", err)
	}
	res = findKind(collect(t, evs2, "turn.done", 1), "tool.result")
	if len(res) != 1 || res[0]["ok"] != true || !strings.Contains(res[0]["output"].(string), "A: Blue") {
		t.Fatalf("ask_user's result on A: %v", res)
	}
	if err := a.Call(ctx, "question.respond", map[string]any{"questionId": qid, "declined": true}, nil); err == nil || err.StringCode() != "not_found" {
		t.Fatalf("a second answer on A: %v, want not_found", err)
	}
}
