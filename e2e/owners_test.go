package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// ownedJob is a job of job.list with its owner.
type ownedJob struct {
	JobID string `json:"jobId"`
	Owner *struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"owner"`
}

func listJobs(t *testing.T, c client) []ownedJob {
	t.Helper()
	var res struct {
		Jobs []ownedJob `json:"jobs"`
	}
	if err := c.Call(context.Background(), "job.list", map[string]any{}, &res); err != nil {
		t.Fatalf("job.list: %v", err)
	}
	return res.Jobs
}

// runJobNow runs a job through c and returns its run's session.
func runJobNow(t *testing.T, c client, id string) string {
	t.Helper()
	var run struct {
		SessionID string `json:"sessionId"`
		Status    string `json:"status"`
	}
	if err := c.Call(context.Background(), "job.runNow", map[string]any{"jobId": id}, &run); err != nil || run.Status != "ok" {
		t.Fatalf("job.runNow %s: %+v %v", id, run, err)
	}
	return run.SessionID
}

// nextJobNote returns the jobId and kind of the next job.event c receives.
func nextJobNote(t *testing.T, c *wsClient) string {
	t.Helper()
	for {
		n := nextNote(t, c)
		if n.Method != "job.event" {
			continue
		}
		var ev struct {
			JobID string `json:"jobId"`
			Kind  string `json:"kind"`
		}
		_ = json.Unmarshal(n.Params, &ev)
		return ev.JobID + "/" + ev.Kind
	}
}

// TestJobOwnership: a job belongs to the member that scheduled it, and so
// do its runs' sessions. Another member neither lists, runs nor cancels it
// (not_found, as an unknown job, on WebSocket, gRPC and REST) and gets
// none of its job.event notifications; the owner watches, resumes and
// prompts the sessions of its runs, also of a run an operator started;
// operators see and manage every job; a member cannot post a job's answer
// to a gateway binding (forbidden). On the embedded store and PostgreSQL.
func TestJobOwnership(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testJobOwnership(t, startDaemon(t)) })
	t.Run("postgres", func(t *testing.T) {
		testJobOwnership(t, startDaemonWith(t, daemon.Config{Store: pgtest.FreshSchema(t, pgtest.Server(t))}))
	})
}

func testJobOwnership(t *testing.T, d *daemon.Daemon) {
	admin := helloWS(t, d)
	annID, annKey := makePrincipal(t, admin, "ann", "member")
	_, bobKey := makePrincipal(t, admin, "bob", "member")
	_, opKey := makePrincipal(t, admin, "olga", "operator")
	ann, _ := helloWSKey(t, d, annKey)
	bob, _ := helloWSKey(t, d, bobKey)
	op, _ := helloWSKey(t, d, opKey)
	bobGRPC := dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), bobKey)
	ctx := context.Background()

	annJob := scheduleJob(t, ann, map[string]any{"spec": "@daily", "task": "hello"})
	bobJob := scheduleJob(t, bob, map[string]any{"spec": "@daily", "task": "hello"})

	// Listing: each member its own job, the operator and the admin both.
	for who, c := range map[string]client{"ann": ann, "bob": bob, "bob/grpc": bobGRPC} {
		want := annJob
		if who != "ann" {
			want = bobJob
		}
		if got := listJobs(t, c); len(got) != 1 || got[0].JobID != want {
			t.Errorf("%s lists %+v, want only %s", who, got, want)
		}
	}
	for who, c := range map[string]client{"olga": op, "admin": admin} {
		jobs := listJobs(t, c)
		i := slices.IndexFunc(jobs, func(j ownedJob) bool { return j.JobID == annJob })
		if len(jobs) != 2 || i < 0 || jobs[i].Owner == nil || jobs[i].Owner.ID != annID || jobs[i].Owner.Name != "ann" {
			t.Errorf("%s lists %+v, want both jobs, %s owned by ann (%s)", who, jobs, annJob, annID)
		}
	}

	// Another member cannot tell ann's job exists: the same answer as an
	// unknown job on every transport.
	routes := restRoutes(t)
	for _, method := range []string{"job.runNow", "job.cancel"} {
		for _, id := range []string{annJob, "j-none"} {
			params := map[string]any{"jobId": id}
			for who, c := range map[string]client{"bob/ws": bob, "bob/grpc": bobGRPC} {
				if got := codeOf(c.Call(ctx, method, params, nil)); got != "not_found" {
					t.Errorf("%s %s %s: %q, want not_found", who, method, id, got)
				}
			}
			if status, code := restAs(t, d, routes[method], bobKey, params); code != "not_found" || status != http.StatusNotFound {
				t.Errorf("bob/rest %s %s: %d %q, want 404 not_found", method, id, status, code)
			}
		}
	}
	// A member's job cannot post to a gateway binding.
	if got := codeOf(ann.Call(ctx, "job.schedule", map[string]any{"spec": "@daily", "task": "x", "workdir": t.TempDir(), "channel": "b-any"}, nil)); got != "forbidden" {
		t.Errorf("ann schedules a job with a channel: %q, want forbidden", got)
	}

	// ann runs her job, then bob his, then ann hers again; each answers
	// after its run ended, so the events come in that order. bob's gRPC
	// JobService.Watch is filtered as his WebSocket notifications are.
	bobWatch := bobGRPC.watchJobs(t)
	annRun := runJobNow(t, ann, annJob)
	runJobNow(t, bob, bobJob)
	runJobNow(t, ann, annJob)
	for who, c := range map[string]*wsClient{"ann": ann, "bob": bob, "olga": op} {
		var want []string
		for _, run := range []string{annJob, bobJob, annJob} {
			if who == "olga" || (who == "ann") == (run == annJob) {
				want = append(want, run+"/started", run+"/finished")
			}
		}
		var got []string
		for range want {
			got = append(got, nextJobNote(t, c))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s's job.event notifications: %v, want %v", who, got, want)
		}
	}
	select {
	case ev := <-bobWatch:
		if ev["jobId"] != bobJob || ev["kind"] != "started" {
			t.Errorf("bob's first JobService.Watch event over gRPC: %v, want his job's start", ev)
		}
	case <-time.After(10 * time.Second):
		t.Error("no JobService.Watch event over gRPC for bob within 10 s")
	}
	// bob is not told of ann's last run: the next job.event he gets is
	// his own job's.
	runJobNow(t, ann, annJob)
	runJobNow(t, bob, bobJob)
	if got := nextJobNote(t, bob); got != bobJob+"/started" {
		t.Errorf("bob's next job.event %s, want his job's start (none of ann's)", got)
	}

	// The run's session is ann's: she lists, resumes and prompts it; bob
	// cannot see it; the operator reads it.
	if got := listedSessions(t, ann); !slices.Contains(got, annRun) {
		t.Errorf("ann lists %v, not her job's session %s", got, annRun)
	}
	var res struct {
		Events []map[string]any `json:"events"`
	}
	if err := ann.Call(ctx, "session.resume", map[string]any{"sessionId": annRun}, &res); err != nil || len(res.Events) == 0 {
		t.Fatalf("ann resumes her job's session: %v (%d events)", err, len(res.Events))
	}
	promptComplete(t, ann, annRun, "hello again")
	if got := codeOf(bob.Call(ctx, "session.resume", map[string]any{"sessionId": annRun}, nil)); got != "not_found" {
		t.Errorf("bob resumes ann's job session: %q, want not_found", got)
	}
	if got := codeOf(op.Call(ctx, "session.resume", map[string]any{"sessionId": annRun}, nil)); got != "" {
		t.Errorf("olga resumes ann's job session: %q", got)
	}

	// The operator runs ann's job: the run's session is still ann's.
	opRun := runJobNow(t, op, annJob)
	if got := codeOf(ann.Call(ctx, "session.setMode", map[string]any{"sessionId": opRun, "mode": "plan"}, nil)); got != "" {
		t.Errorf("ann acts on the run olga started of her job: %q", got)
	}
	if got := codeOf(op.Call(ctx, "session.setMode", map[string]any{"sessionId": opRun, "mode": "plan"}, nil)); got != "forbidden" {
		t.Errorf("olga acts on ann's job session: %q, want forbidden (operators read, owners act)", got)
	}
	// A run's approval is the owner's to answer (the run has no origin:
	// its approvals wait in the queue, which tells the owner); bob cannot
	// answer it.
	asks := scheduleJob(t, ann, map[string]any{"spec": "@daily", "task": "run ls"})
	ran := make(chan string, 1)
	go func() {
		var run struct {
			Status string `json:"status"`
		}
		if err := ann.Call(ctx, "job.runNow", map[string]any{"jobId": asks}, &run); err != nil {
			t.Errorf("job.runNow %s: %v", asks, err)
		}
		ran <- run.Status
	}()
	var pending approvalNote
	for pending.Method != "approval.pending" {
		pending = nextApprovalNote(t, ann)
	}
	reqID := pending.params["request"].(map[string]any)["requestId"]
	if got := codeOf(bob.Call(ctx, "approval.respond", map[string]any{"requestId": reqID, "decision": "allow"}, nil)); got != "not_found" {
		t.Errorf("bob answers ann's job run's approval: %q, want not_found", got)
	}
	if err := ann.Call(ctx, "approval.respond", map[string]any{"requestId": reqID, "decision": "allow"}, nil); err != nil {
		t.Fatalf("ann answers her job run's approval: %v", err)
	}
	if status := <-ran; status != "ok" {
		t.Errorf("the run whose approval ann allowed ended %q, want ok", status)
	}

	// A job runs as its owner only while the owner may: demoted to
	// viewer, ann's job does not run, whoever asks; given the role back,
	// it runs again.
	setRole := func(role string) {
		t.Helper()
		if err := admin.Call(ctx, "principal.update", map[string]any{"principalId": annID, "role": role}, nil); err != nil {
			t.Fatalf("principal.update ann %s: %v", role, err)
		}
	}
	setRole("viewer")
	if err := op.Call(ctx, "job.runNow", map[string]any{"jobId": annJob}, nil); codeOf(err) != "forbidden" || !strings.Contains(err.Message, "viewer") {
		t.Errorf("olga runs the job of ann, a viewer now: %v, want forbidden naming her role", err)
	}
	setRole("member")
	runJobNow(t, op, annJob)

	// Operators manage every job; the owner its own.
	if err := op.Call(ctx, "job.cancel", map[string]any{"jobId": bobJob}, nil); err != nil {
		t.Errorf("olga cancels bob's job: %v", err)
	}
	if err := ann.Call(ctx, "job.cancel", map[string]any{"jobId": annJob}, nil); err != nil {
		t.Errorf("ann cancels her job: %v", err)
	}
}

// TestBindingOwnership: a gateway binding belongs to the operator that
// made it (gateway.list shows the owner) and so do the sessions its
// conversations create, on which the operator may then act; an operator
// cannot bind a channel to a member's session, which it may only read.
func TestBindingOwnership(t *testing.T) {
	home := t.TempDir()
	writeWebhookSecret(t, home)
	d := startDaemonHome(t, home, daemon.Config{})
	admin := helloWS(t, d)
	olgaID, opKey := makePrincipal(t, admin, "olga", "operator")
	_, annKey := makePrincipal(t, admin, "ann", "member")
	op, _ := helloWSKey(t, d, opKey)
	ann, _ := helloWSKey(t, d, annKey)
	ctx := context.Background()

	var bound struct {
		BindingID string `json:"bindingId"`
	}
	if err := op.Call(ctx, "gateway.bind", map[string]any{
		"platform": "webhook", "credentialsRef": "secret:hook",
		"target": map[string]any{"newSession": map[string]any{"workdir": home, "mode": "plan"}},
	}, &bound); err != nil {
		t.Fatalf("olga binds: %v", err)
	}
	var list struct {
		Bindings []struct {
			BindingID string `json:"bindingId"`
			Owner     *struct {
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"owner"`
		} `json:"bindings"`
	}
	if err := admin.Call(ctx, "gateway.list", map[string]any{}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Bindings) != 1 || list.Bindings[0].Owner == nil || list.Bindings[0].Owner.ID != olgaID || list.Bindings[0].Owner.Name != "olga" {
		t.Fatalf("gateway.list %+v, want the binding owned by olga (%s)", list.Bindings, olgaID)
	}

	before := listedSessions(t, admin)
	if code, body := signedPost(t, d, bound.BindingID, webhookSecret, map[string]any{"text": "hello", "userId": "u1", "wait": true}); code != http.StatusOK {
		t.Fatalf("wait post: %d %s", code, body)
	}
	var chat string
	for _, s := range listedSessions(t, admin) {
		if !slices.Contains(before, s) {
			chat = s
		}
	}
	if chat == "" {
		t.Fatal("the conversation created no session")
	}
	if got := codeOf(op.Call(ctx, "session.setMode", map[string]any{"sessionId": chat, "mode": "accept"}, nil)); got != "" {
		t.Errorf("olga acts on her binding's conversation session: %q", got)
	}
	if got := codeOf(ann.Call(ctx, "session.resume", map[string]any{"sessionId": chat}, nil)); got != "not_found" {
		t.Errorf("ann resumes olga's binding session: %q, want not_found", got)
	}

	// A binding answers as its owner only while the owner may: olga
	// demoted to member, the message fails and gateway.list says why.
	if err := admin.Call(ctx, "principal.update", map[string]any{"principalId": olgaID, "role": "member"}, nil); err != nil {
		t.Fatal(err)
	}
	if code, body := signedPost(t, d, bound.BindingID, webhookSecret, map[string]any{"text": "hello", "userId": "u1", "wait": true}); code != http.StatusBadGateway || !strings.Contains(string(body), "olga") {
		t.Errorf("post to the binding of olga, a member now: %d %s, want 502 naming her", code, body)
	}
	var states struct {
		Bindings []struct {
			State     string `json:"state"`
			LastError string `json:"lastError"`
		} `json:"bindings"`
	}
	if err := admin.Call(ctx, "gateway.list", map[string]any{}, &states); err != nil || len(states.Bindings) != 1 ||
		states.Bindings[0].State != "error" || !strings.Contains(states.Bindings[0].LastError, "member") {
		t.Errorf("gateway.list after the refused message: %+v %v, want state error naming the role", states, err)
	}
	if err := admin.Call(ctx, "principal.update", map[string]any{"principalId": olgaID, "role": "operator"}, nil); err != nil {
		t.Fatal(err)
	}
	if code, body := signedPost(t, d, bound.BindingID, webhookSecret, map[string]any{"text": "hello", "userId": "u1", "wait": true}); code != http.StatusOK {
		t.Errorf("post once olga is an operator again: %d %s", code, body)
	}

	annSession := createSession(t, ann, nil)
	err := op.Call(ctx, "gateway.bind", map[string]any{
		"platform": "webhook", "credentialsRef": "secret:hook", "target": map[string]any{"session": annSession},
	}, nil)
	if got := codeOf(err); got != "forbidden" {
		t.Errorf("olga binds a channel to ann's session: %q, want forbidden", got)
	}
}
