package rpc

import (
	"context"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"

	"github.com/trellis-run/trellis/internal/duration"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/session"
)

// PruneSessions applies a retention policy (session.prune): the request's
// rules, the daemon's for those it leaves out.
func (s *SessionServer) PruneSessions(ctx context.Context, req *trellisv1.PruneSessionsRequest) (*trellisv1.PruneSessionsResponse, error) {
	p := session.PruneParams{Per: req.GetPer(), DryRun: req.GetDryRun()}
	if req.OlderThan != nil {
		d, err := duration.Parse(req.GetOlderThan())
		if err != nil || d < 0 {
			return nil, errs.New(errcode.InvalidParams, "olderThan %q: want a duration such as \"30d\", \"720h\" or \"90m\", or \"0\" for no age rule", req.GetOlderThan())
		}
		p.Within = &d
	}
	if req.KeepLatest != nil {
		n := int(req.GetKeepLatest())
		if n < 0 {
			return nil, errs.New(errcode.InvalidParams, "keepLatest %d: want 1 or more, or 0 for no such rule", n)
		}
		p.Latest = &n
	}
	res, err := s.sessions.Prune(ctx, p)
	if err != nil {
		return nil, err
	}
	out := &trellisv1.PruneSessionsResponse{
		KeepLatest: int32(res.Policy.Latest), Per: res.Policy.Per, DryRun: req.GetDryRun(),
		Deleted: int32(res.Deleted), CheckpointBytes: res.CheckpointBytes,
		Sessions: make([]*trellisv1.PrunedSession, 0, len(res.Sessions)),
	}
	if res.Policy.Within > 0 {
		out.OlderThan = res.Policy.Within.String()
	}
	for _, pr := range res.Sessions {
		out.Sessions = append(out.Sessions, &trellisv1.PrunedSession{
			SessionId: pr.Row.SessionID, Workdir: pr.Row.Workdir, Agent: optional(pr.Row.Agent),
			LastActivityAt: FormatTime(pr.LastActivity), Reason: pr.Reason, Held: optional(pr.Held),
		})
	}
	return out, nil
}
