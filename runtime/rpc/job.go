package rpc

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/job"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
)

// JobServer implements trellisv1.JobServiceServer over the job service.
type JobServer struct {
	trellisv1.UnsafeJobServiceServer
	jobs *job.Service
}

// NewJobServer returns the job service.
func NewJobServer(jobs *job.Service) *JobServer {
	return &JobServer{jobs: jobs}
}

// A job belongs to the principal that scheduled it, and so do the sessions
// of its runs. Operators and admins see and manage every job; any other
// role only the jobs it owns: another's job answers not_found, as an
// unknown one does (no existence leak).

// jobVisible says whether the caller may see and manage def.
func jobVisible(ctx context.Context, def job.Def) bool {
	who := visibleTo(ctx)
	return who == "" || def.Owner == who
}

// ownedJob returns job id if the caller may see it, else not_found.
func (s *JobServer) ownedJob(ctx context.Context, id string) error {
	def, err := s.jobs.Get(ctx, id)
	if err != nil {
		return err
	}
	if !jobVisible(ctx, def) {
		return errs.Wrap(errcode.NotFound, job.ErrNotFound, "job %s not found", id)
	}
	return nil
}

// ScheduleJob saves a job, owned by the caller, and queues its first slot.
func (s *JobServer) ScheduleJob(ctx context.Context, req *trellisv1.ScheduleJobRequest) (*trellisv1.ScheduleJobResponse, error) {
	if req.GetChannel() != "" && visibleTo(ctx) != "" {
		return nil, errs.New(errcode.Forbidden, "channel %q is a gateway binding, which only operators and admins manage: schedule the job without channel (watch job.event and resume its sessions instead)", req.GetChannel()).
			WithData("minRole", store.RoleOperator)
	}
	owner, ownerName := ownerOf(ctx), ""
	if p, ok := auth.PrincipalFrom(ctx); ok && owner != "" {
		ownerName = p.Name
	}
	def, err := s.jobs.Schedule(ctx, job.ScheduleParams{
		Spec: req.GetSpec(), Task: req.GetTask(), Mode: req.GetMode(), Workdir: req.GetWorkdir(), Agent: req.GetAgent(),
		Channel: req.GetChannel(), Owner: owner, OwnerName: ownerName, MayRun: callerMayRun(ctx),
		Budget: session.Limits{MaxCostMicroUSD: req.MaxCostMicroUsd, MaxTokens: req.MaxTokens},
	})
	if err != nil {
		return nil, err
	}
	return &trellisv1.ScheduleJobResponse{JobId: def.JobID, NextRunAt: optionalTime(def.NextRunAt)}, nil
}

// ListJobs lists the jobs the caller may see, newest first, with their
// last run.
func (s *JobServer) ListJobs(ctx context.Context, _ *trellisv1.ListJobsRequest) (*trellisv1.ListJobsResponse, error) {
	defs, err := s.jobs.List(ctx)
	if err != nil {
		return nil, err
	}
	out := &trellisv1.ListJobsResponse{Jobs: make([]*trellisv1.Job, 0, len(defs))}
	for _, d := range defs {
		if !jobVisible(ctx, d) {
			continue
		}
		out.Jobs = append(out.Jobs, jobToProto(d))
	}
	return out, nil
}

// CancelJob disables a job's future fires and interrupts its running runs.
func (s *JobServer) CancelJob(ctx context.Context, req *trellisv1.CancelJobRequest) (*trellisv1.CancelJobResponse, error) {
	if err := s.ownedJob(ctx, req.GetJobId()); err != nil {
		return nil, err
	}
	if err := s.jobs.Cancel(ctx, req.GetJobId()); err != nil {
		return nil, err
	}
	return &trellisv1.CancelJobResponse{Ok: true}, nil
}

// RunJobNow runs a job once and answers when that run has ended.
func (s *JobServer) RunJobNow(ctx context.Context, req *trellisv1.RunJobNowRequest) (*trellisv1.RunJobNowResponse, error) {
	if err := s.ownedJob(ctx, req.GetJobId()); err != nil {
		return nil, err
	}
	out, err := s.jobs.RunNow(ctx, req.GetJobId())
	if err != nil {
		return nil, err
	}
	return &trellisv1.RunJobNowResponse{SessionId: out.SessionID, Status: out.Status, Ok: true}, nil
}

// Watch streams job.event notifications of the jobs the caller may see. A
// watcher that falls too far behind is ended with overloaded; it should
// watch again and list.
func (s *JobServer) Watch(_ *trellisv1.JobServiceWatchRequest, stream grpc.ServerStreamingServer[trellisv1.JobServiceWatchResponse]) error {
	who := visibleTo(stream.Context())
	w := s.jobs.Watch(stream.Context())
	// The headers tell the client that it is watching: events from now on
	// reach it.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for ev := range w.Events() {
		if who != "" && ev.Owner != who {
			continue
		}
		if err := stream.Send(&trellisv1.JobServiceWatchResponse{Event: jobEventToProto(ev)}); err != nil {
			return err
		}
	}
	if errors.Is(w.Err(), job.ErrLagged) {
		return errs.New(errcode.Overloaded, "this job event watcher fell too far behind and was dropped: watch again, then call ListJobs to catch up")
	}
	return nil
}

func jobToProto(d job.Def) *trellisv1.Job {
	return &trellisv1.Job{
		Owner: principalRef(d.Owner, d.OwnerName),
		JobId: d.JobID, Spec: d.Spec, Task: d.Task, Mode: d.Mode, Workdir: d.Workdir, Kind: d.Kind,
		State: d.State(), Enabled: d.Enabled(),
		NextRunAt:     optionalTime(d.NextRunAt),
		LastRunAt:     optionalTime(d.LastRunAt),
		LastStatus:    optional(d.LastStatus),
		LastSessionId: optional(d.LastSessionID),
	}
}

func jobEventToProto(ev job.Event) *trellisv1.JobEvent {
	payload, err := structpb.NewStruct(ev.Payload)
	if err != nil {
		payload = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	return &trellisv1.JobEvent{JobId: ev.JobID, Kind: ev.Kind, Payload: payload}
}

func optionalTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	return optional(FormatTime(t))
}
