package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/trellis-run/trellis/daemon"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
)

// jobRow is one job of job.list.
type jobRow struct {
	JobID         string  `json:"jobId"`
	Spec          string  `json:"spec"`
	Kind          string  `json:"kind"`
	State         string  `json:"state"`
	Enabled       bool    `json:"enabled"`
	NextRunAt     *string `json:"nextRunAt"`
	LastRunAt     *string `json:"lastRunAt"`
	LastStatus    *string `json:"lastStatus"`
	LastSessionID *string `json:"lastSessionId"`
}

func scheduleJob(t *testing.T, c client, params map[string]any) string {
	t.Helper()
	if _, ok := params["workdir"]; !ok {
		params["workdir"] = t.TempDir()
	}
	var res struct {
		JobID     string  `json:"jobId"`
		NextRunAt *string `json:"nextRunAt"`
	}
	if err := c.Call(context.Background(), "job.schedule", params, &res); err != nil {
		t.Fatalf("job.schedule: %v", err)
	}
	if !strings.HasPrefix(res.JobID, "j-") || res.NextRunAt == nil {
		t.Fatalf("job.schedule result %+v", res)
	}
	return res.JobID
}

func listJob(t *testing.T, c client, id string) jobRow {
	t.Helper()
	var res struct {
		Jobs []jobRow `json:"jobs"`
	}
	if err := c.Call(context.Background(), "job.list", map[string]any{}, &res); err != nil {
		t.Fatalf("job.list: %v", err)
	}
	for _, j := range res.Jobs {
		if j.JobID == id {
			return j
		}
	}
	t.Fatalf("job %s not in job.list %+v", id, res.Jobs)
	return jobRow{}
}

// waitJobEvent reads the WebSocket client's notifications until a job.event
// of kind for job id arrives.
func waitJobEvent(t *testing.T, c *wsClient, id, kind string) map[string]any {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case f := <-c.notes:
			if f.Method != "job.event" {
				continue
			}
			var ev map[string]any
			_ = json.Unmarshal(f.Params, &ev)
			if ev["jobId"] == id && ev["kind"] == kind {
				return ev
			}
		case <-deadline:
			t.Fatalf("no job.event %s for %s within 15 s", kind, id)
		}
	}
}

// watchJobs opens JobService.Watch and returns its events as job.event
// params; it returns once the stream is open (events from now on arrive).
func (c *grpcClient) watchJobs(t *testing.T) <-chan map[string]any {
	t.Helper()
	stream, err := trellisv1.NewJobServiceClient(c.conn).Watch(c.outgoing(c.ctx), &trellisv1.JobServiceWatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan map[string]any, 1024)
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			var ev map[string]any
			_ = json.Unmarshal(codec.Marshal(resp.GetEvent()), &ev)
			ch <- ev
		}
	}()
	return ch
}

func nextJobEvent(t *testing.T, ch <-chan map[string]any, id, kind string) map[string]any {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case ev := <-ch:
			if ev["jobId"] == id && ev["kind"] == kind {
				return ev
			}
		case <-deadline:
			t.Fatalf("no job.event %s for %s within 15 s", kind, id)
		}
	}
}

// TestJobEveryFiresAndResumes: an @every 2s job fires repeatedly over the
// WebSocket protocol; job.event started/finished arrive; job.list shows the
// last run, whose session resumes with the run's events.
func TestJobEveryFiresAndResumes(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	ctx := context.Background()
	var hello struct {
		Capabilities []string `json:"capabilities"`
	}
	other := dialWS(t, d)
	if err := other.Call(ctx, "system.hello", map[string]any{"token": d.Token(), "clientVersion": "test", "protocolVersion": "1.0.0"}, &hello); err != nil || !slices.Contains(hello.Capabilities, "jobs") {
		t.Fatalf("hello capabilities %v (%v), want jobs", hello.Capabilities, err)
	}
	id := scheduleJob(t, c, map[string]any{"spec": "@every 2s", "task": "hello"})
	var finished []map[string]any
	for range 2 {
		started := waitJobEvent(t, c, id, "started")
		done := waitJobEvent(t, c, id, "finished")
		sp, dp := started["payload"].(map[string]any), done["payload"].(map[string]any)
		if sp["sessionId"] != dp["sessionId"] || dp["status"] != "ok" || dp["trigger"] != "schedule" || dp["slot"] == nil {
			t.Fatalf("started %v, finished %v", started, done)
		}
		finished = append(finished, dp)
	}
	if finished[0]["slot"] == finished[1]["slot"] || finished[0]["sessionId"] == finished[1]["sessionId"] {
		t.Fatalf("two runs for one slot or session: %v", finished)
	}
	var info struct {
		Counters struct {
			Jobs int `json:"jobs"`
		} `json:"counters"`
	}
	if err := c.Call(ctx, "system.info", map[string]any{}, &info); err != nil || info.Counters.Jobs != 1 {
		t.Fatalf("system.info counters.jobs = %d (%v), want 1", info.Counters.Jobs, err)
	}
	if err := c.Call(ctx, "job.cancel", map[string]any{"jobId": id}, nil); err != nil {
		t.Fatalf("job.cancel: %v", err)
	}
	j := listJob(t, c, id)
	if j.LastRunAt == nil || j.LastStatus == nil || *j.LastStatus != "ok" || j.LastSessionID == nil ||
		*j.LastSessionID != finished[1]["sessionId"] || j.Kind != "interval" || j.State != "cancelled" || j.Enabled || j.NextRunAt != nil {
		t.Fatalf("job.list after two runs and cancel: %+v", j)
	}
	var res struct {
		Events []map[string]any `json:"events"`
	}
	if err := c.Call(ctx, "session.resume", map[string]any{"sessionId": *j.LastSessionID}, &res); err != nil {
		t.Fatalf("session.resume: %v", err)
	}
	kinds := eventKinds(res.Events)
	last := res.Events[len(res.Events)-1]
	if kinds[0] != "turn.started" || !slices.Contains(kinds, "message.done") || last["kind"] != "turn.done" || payloadOf(last)["reason"] != "complete" {
		t.Fatalf("resumed events %v", kinds)
	}
	var sessions struct {
		Sessions []struct {
			SessionID string  `json:"sessionId"`
			Kind      string  `json:"kind"`
			JobID     *string `json:"jobId"`
		} `json:"sessions"`
	}
	if err := c.Call(ctx, "session.list", map[string]any{}, &sessions); err != nil {
		t.Fatal(err)
	}
	runs := 0
	for _, s := range sessions.Sessions {
		if s.JobID != nil && *s.JobID == id {
			runs++
			if s.Kind != "scheduled" {
				t.Fatalf("run session %+v, want kind scheduled", s)
			}
		}
	}
	if runs != 2 {
		t.Fatalf("%d sessions for the job, want 2 (one per run)", runs)
	}
}

// TestJobApprovalTimeoutAndRunNow: a run whose tool call needs approval
// that nobody gives ends denied_by_timeout with job.event{denied}; runNow
// answers after its run with the session id and status.
func TestJobApprovalTimeoutAndRunNow(t *testing.T) {
	d := startDaemonWith(t, daemon.Config{ApprovalTimeout: time.Second})
	c := helloWS(t, d)
	ctx := context.Background()
	at := time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	id := scheduleJob(t, c, map[string]any{"spec": "once " + at, "task": "run ls", "mode": "accept"})
	pending := waitNote(t, c, "approval.pending")
	denied := waitJobEvent(t, c, id, "denied")
	p := denied["payload"].(map[string]any)
	if p["status"] != "denied_by_timeout" || pending["request"].(map[string]any)["sessionId"] != p["sessionId"] {
		t.Fatalf("denied %v after approval.pending %v", denied, pending)
	}
	j := listJob(t, c, id)
	if j.LastStatus == nil || *j.LastStatus != "denied_by_timeout" || j.Kind != "once" || j.State != "done" || j.Enabled {
		t.Fatalf("job.list after the timed-out run: %+v", j)
	}

	start := time.Now()
	var run struct {
		SessionID string `json:"sessionId"`
		Status    string `json:"status"`
	}
	hello := scheduleJob(t, c, map[string]any{"spec": "@daily", "task": "hello"})
	if err := c.Call(ctx, "job.runNow", map[string]any{"jobId": hello}, &run); err != nil || run.Status != "ok" || !strings.HasPrefix(run.SessionID, "s-") {
		t.Fatalf("job.runNow: %+v %v", run, err)
	}
	var res struct {
		Events []map[string]any `json:"events"`
	}
	if err := c.Call(ctx, "session.resume", map[string]any{"sessionId": run.SessionID}, &res); err != nil {
		t.Fatal(err)
	}
	if last := res.Events[len(res.Events)-1]; last["kind"] != "turn.done" {
		t.Fatalf("runNow answered before its run ended: last event %v", last)
	}
	if err := c.Call(ctx, "job.runNow", map[string]any{"jobId": id}, &run); err != nil || run.Status != "denied_by_timeout" {
		t.Fatalf("job.runNow of the approval job: %+v %v", run, err)
	}
	t.Logf("runNow answered after its run; both runs took %v", time.Since(start).Round(time.Millisecond))
}

// TestJobCancelInterruptsRun: job.cancel interrupts a run in progress;
// runNow then answers with status error.
func TestJobCancelInterruptsRun(t *testing.T) {
	d := startDaemon(t)
	c := dialGRPC(t, d)
	events := c.watchJobs(t)
	id := scheduleJob(t, c, map[string]any{"spec": "@daily", "task": "slow"})
	type result struct {
		SessionID string `json:"sessionId"`
		Status    string `json:"status"`
	}
	done := make(chan result, 1)
	go func() {
		var r result
		if err := c.Call(context.Background(), "job.runNow", map[string]any{"jobId": id}, &r); err != nil {
			t.Errorf("job.runNow: %v", err)
		}
		done <- r
	}()
	started := nextJobEvent(t, events, id, "started")
	begin := time.Now()
	if err := c.Call(context.Background(), "job.cancel", map[string]any{"jobId": id}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.Status != "error" || r.SessionID != started["payload"].(map[string]any)["sessionId"] {
			t.Fatalf("runNow after cancel: %+v (started %v)", r, started)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("runNow did not answer within 10 s of job.cancel")
	}
	failed := nextJobEvent(t, events, id, "failed")
	if failed["payload"].(map[string]any)["reason"] != "interrupted" {
		t.Fatalf("failed event %v", failed)
	}
	if j := listJob(t, c, id); j.State != "cancelled" || *j.LastStatus != "error" {
		t.Fatalf("after cancel: %+v", j)
	}
	t.Logf("job.cancel interrupted the run in %v", time.Since(begin).Round(time.Millisecond))
}

// TestJobBadInputs runs on every transport: bad specs are invalid_params
// naming what is wrong, unknown ids not_found.
func TestJobBadInputs(t *testing.T) {
	eachTransport(t, func(t *testing.T, d *daemon.Daemon, dial func() client) {
		c := dial()
		ctx := context.Background()
		wd := t.TempDir()
		for spec, reason := range map[string]string{
			"every other day":             "<days> at <time>",
			"* * 1":                       "has 3",
			"* * * *":                     "5 fields",
			"61 * * * *":                  "above maximum",
			"@every 10ms":                 "minimum 1s",
			"@every soon":                 "not a duration",
			"@monthly":                    "unknown descriptor @monthly",
			"once tomorrow":               "not an RFC3339 time",
			"once 2001-01-01T00:00:00Z":   "has passed",
			"CRON_TZ=Mars/Base 0 9 * * *": "unknown time zone",
		} {
			err := c.Call(ctx, "job.schedule", map[string]any{"spec": spec, "task": "hello", "workdir": wd}, nil)
			if err == nil || err.StringCode() != "invalid_params" || !strings.Contains(err.Message, reason) {
				t.Errorf("spec %q: %v, want invalid_params mentioning %q", spec, err, reason)
			}
		}
		if err := c.Call(ctx, "job.schedule", map[string]any{"spec": "@daily", "task": "", "workdir": wd}, nil); err == nil || err.StringCode() != "invalid_params" {
			t.Errorf("empty task: %v", err)
		}
		if err := c.Call(ctx, "job.schedule", map[string]any{"spec": "@daily", "task": "x", "workdir": filepath.Join(wd, "nope")}, nil); err == nil || err.StringCode() != "invalid_params" {
			t.Errorf("missing workdir: %v", err)
		}
		for _, m := range []string{"job.cancel", "job.runNow"} {
			if err := c.Call(ctx, m, map[string]any{"jobId": "j-0000"}, nil); err == nil || err.StringCode() != "not_found" {
				t.Errorf("%s unknown id: %v, want not_found", m, err)
			}
		}
	})
}

// fireRow is one River job row of a fire.
type fireRow struct {
	slot        time.Time
	state       string
	attempt     int
	attemptedBy string
}

// fireRows reads the River rows of a job's fires from <home>/jobs.db.
func fireRows(t *testing.T, home, id string) []fireRow {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(home, "jobs.db")+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT json(args), state, attempt, COALESCE(json(attempted_by), '') FROM river_job WHERE kind = 'trellis_job_fire'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []fireRow
	for rows.Next() {
		var args []byte
		var r fireRow
		if err := rows.Scan(&args, &r.state, &r.attempt, &r.attemptedBy); err != nil {
			t.Fatal(err)
		}
		var a struct {
			JobID string `json:"jobId"`
			Slot  string `json:"slot"`
		}
		if err := json.Unmarshal(args, &a); err != nil {
			t.Fatalf("args %s: %v", args, err)
		}
		if a.JobID != id {
			continue
		}
		if r.slot, err = time.Parse(time.RFC3339Nano, a.Slot); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b fireRow) int { return a.slot.Compare(b.slot) })
	return out
}

// TestJobKillNineCatchUpOnce: kill -9 while a job is scheduled, restart
// after several missed slots: exactly one catch-up run, and no slot runs
// twice (River's rows and the sessions created agree).
func TestJobKillNineCatchUpOnce(t *testing.T) {
	home := t.TempDir()
	p := startProc(t, home)
	c := dialInfo(t, p.info)
	ctx := context.Background()
	events := c.watchJobs(t)
	id := scheduleJob(t, c, map[string]any{"spec": "@every 1s", "task": "hello"})
	for range 2 {
		nextJobEvent(t, events, id, "finished")
	}
	p.kill()
	killed := time.Now()
	c.Close()
	time.Sleep(4 * time.Second) // the downtime: four slots pass
	restart := time.Now()
	p2 := startProc(t, home)
	c2 := dialInfo(t, p2.info)
	// Wait until a regular slot after the restart has run too.
	deadline := time.Now().Add(15 * time.Second)
	for {
		rows := fireRows(t, home, id)
		if slices.ContainsFunc(rows, func(r fireRow) bool { return r.slot.After(restart) && r.state == "completed" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run for a slot after the restart within 15 s: %+v", rows)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := c2.Call(ctx, "job.cancel", map[string]any{"jobId": id}, nil); err != nil {
		t.Fatal(err)
	}
	rows := fireRows(t, home, id)

	// The second daemon's River client id, from a row only it can have worked.
	var second string
	for _, r := range rows {
		if r.slot.After(restart) && r.attemptedBy != "" {
			second = r.attemptedBy
		}
	}
	worked, catchUp := 0, 0
	seen := map[time.Time]bool{}
	for _, r := range rows {
		if seen[r.slot] {
			t.Fatalf("slot %v queued twice: %+v", r.slot, rows)
		}
		seen[r.slot] = true
		if r.attempt > 1 {
			t.Fatalf("slot %v worked %d times", r.slot, r.attempt)
		}
		if r.attempt == 1 {
			worked++
		}
		if r.slot.Before(restart) && r.attempt == 1 && r.attemptedBy == second {
			catchUp++
		}
	}
	if catchUp != 1 {
		t.Fatalf("%d catch-up runs for the slots missed while down, want exactly 1; rows %+v", catchUp, rows)
	}
	var sessions struct {
		Sessions []struct {
			JobID *string `json:"jobId"`
		} `json:"sessions"`
	}
	if err := c2.Call(ctx, "session.list", map[string]any{"includeClosed": true}, &sessions); err != nil {
		t.Fatal(err)
	}
	runs := 0
	for _, s := range sessions.Sessions {
		if s.JobID != nil && *s.JobID == id {
			runs++
		}
	}
	if runs != worked {
		t.Fatalf("%d sessions for %d worked fire rows: some slot ran twice or not at all", runs, worked)
	}
	for _, r := range rows {
		by := "first daemon"
		switch {
		case r.attempt == 0:
			by = "not worked"
		case r.attemptedBy == second:
			by = "second daemon"
		}
		t.Logf("slot %s: %s, %s", r.slot.Format("15:04:05.000"), r.state, by)
	}
	missed := int(restart.Sub(killed) / time.Second)
	j := listJob(t, c2, id)
	if j.LastStatus == nil || *j.LastStatus != "ok" {
		t.Fatalf("job after restart: %+v", j)
	}
	t.Logf("%d fire rows, %d runs, %d sessions; %d slots passed in %.1f s down; 1 catch-up run; every slot at most once",
		len(rows), worked, runs, missed, restart.Sub(killed).Seconds())
}
