package rpc

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/job"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// stubRunner ends every run at once with status, in session "s-run".
type stubRunner struct{ status string }

func (r stubRunner) Run(_ context.Context, _ job.RunParams, started func(string)) (job.Outcome, error) {
	started("s-run")
	return job.Outcome{SessionID: "s-run", Status: r.status, Reason: "complete"}, nil
}

// newJobClient serves JobService over a real job service (River on SQLite
// in a temp dir, runs stubbed) with the daemon's error mapping.
func newJobClient(t *testing.T, status string) (trellisv1.JobServiceClient, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	svc, err := job.OpenSQLite(context.Background(), filepath.Join(dir, "jobs.db"), job.Deps{Defs: st, Runner: stubRunner{status}}, job.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	i := interceptors{log: slog.New(slog.DiscardHandler)}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(i.mapErrorsUnary), grpc.ChainStreamInterceptor(i.mapErrorsStream))
	trellisv1.RegisterJobServiceServer(gs, NewJobServer(svc))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return trellisv1.NewJobServiceClient(conn), dir
}

func TestJobServiceErrors(t *testing.T) {
	c, dir := newJobClient(t, job.StatusOK)
	ctx := t.Context()
	tests := []struct {
		name   string
		call   func() error
		code   codes.Code
		reason string
	}{
		{"bad spec", func() error {
			_, err := c.ScheduleJob(ctx, &trellisv1.ScheduleJobRequest{Spec: "every now and then", Task: "x", Workdir: &dir})
			return err
		}, codes.InvalidArgument, errcode.InvalidParams},
		{"bad mode", func() error {
			mode := "yolo"
			_, err := c.ScheduleJob(ctx, &trellisv1.ScheduleJobRequest{Spec: "@daily", Task: "x", Mode: &mode, Workdir: &dir})
			return err
		}, codes.InvalidArgument, errcode.InvalidParams},
		{"cancel unknown", func() error {
			_, err := c.CancelJob(ctx, &trellisv1.CancelJobRequest{JobId: "j-404"})
			return err
		}, codes.NotFound, errcode.NotFound},
		{"runNow unknown", func() error {
			_, err := c.RunJobNow(ctx, &trellisv1.RunJobNowRequest{JobId: "j-404"})
			return err
		}, codes.NotFound, errcode.NotFound},
		{"cancel without id", func() error {
			_, err := c.CancelJob(ctx, &trellisv1.CancelJobRequest{})
			return err
		}, codes.InvalidArgument, errcode.InvalidParams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantStatus(t, tt.call(), tt.code, tt.reason) })
	}
}

func TestJobServiceScheduleListRunWatch(t *testing.T) {
	c, dir := newJobClient(t, job.StatusDeniedByTimeout)
	ctx := t.Context()
	watch, err := c.Watch(ctx, &trellisv1.JobServiceWatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Header(); err != nil {
		t.Fatal(err)
	}
	sched, err := c.ScheduleJob(ctx, &trellisv1.ScheduleJobRequest{Spec: "@hourly", Task: "run ls", Workdir: &dir})
	if err != nil {
		t.Fatal(err)
	}
	next, err := time.Parse(time.RFC3339, sched.GetNextRunAt())
	if err != nil || next.Minute() != 0 || len(sched.GetNextRunAt()) != len("2006-01-02T15:04:05.000Z") {
		t.Fatalf("nextRunAt %q (%v), want the next full hour with milliseconds", sched.GetNextRunAt(), err)
	}
	list, err := c.ListJobs(ctx, &trellisv1.ListJobsRequest{})
	if err != nil || len(list.GetJobs()) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	j := list.GetJobs()[0]
	if j.GetJobId() != sched.GetJobId() || j.GetKind() != "cron" || j.GetState() != "scheduled" || !j.GetEnabled() ||
		j.GetMode() != "accept" || j.LastRunAt != nil || j.LastStatus != nil || j.LastSessionId != nil || j.GetNextRunAt() != sched.GetNextRunAt() {
		t.Fatalf("job before any run: %v", j)
	}
	run, err := c.RunJobNow(ctx, &trellisv1.RunJobNowRequest{JobId: sched.GetJobId()})
	if err != nil || run.GetSessionId() != "s-run" || run.GetStatus() != job.StatusDeniedByTimeout {
		t.Fatalf("runNow: %v %v", run, err)
	}
	for _, want := range []string{job.EventStarted, job.EventDenied} {
		ev, err := watch.Recv()
		if err != nil {
			t.Fatal(err)
		}
		e := ev.GetEvent()
		p := e.GetPayload().GetFields()
		if e.GetJobId() != sched.GetJobId() || e.GetKind() != want || p["sessionId"].GetStringValue() != "s-run" || p["trigger"].GetStringValue() != "manual" {
			t.Fatalf("event %v, want %s", e, want)
		}
		if want == job.EventDenied && p["status"].GetStringValue() != job.StatusDeniedByTimeout {
			t.Fatalf("denied event %v", e)
		}
	}
	if _, err := c.CancelJob(ctx, &trellisv1.CancelJobRequest{JobId: sched.GetJobId()}); err != nil {
		t.Fatal(err)
	}
	list, _ = c.ListJobs(ctx, &trellisv1.ListJobsRequest{})
	j = list.GetJobs()[0]
	if j.GetState() != "cancelled" || j.GetEnabled() || j.NextRunAt != nil || j.GetLastStatus() != job.StatusDeniedByTimeout || j.GetLastSessionId() != "s-run" || j.LastRunAt == nil {
		t.Fatalf("job after run and cancel: %v", j)
	}
}
