package rpc

import (
	"context"
	"encoding/json"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/workspace"
)

// maxDiffBytes bounds the diff checkpoint.diff answers (its files list
// every path).
const maxDiffBytes = 8 << 20

// CheckpointServer implements trellisv1.CheckpointServiceServer.
type CheckpointServer struct {
	trellisv1.UnsafeCheckpointServiceServer
	sessions *session.Service
}

// NewCheckpointServer returns the checkpoint service.
func NewCheckpointServer(sessions *session.Service) *CheckpointServer {
	return &CheckpointServer{sessions: sessions}
}

// ListCheckpoints lists a session's checkpoints.
func (s *CheckpointServer) ListCheckpoints(ctx context.Context, req *trellisv1.ListCheckpointsRequest) (*trellisv1.ListCheckpointsResponse, error) {
	list, err := s.sessions.ListCheckpoints(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	out := &trellisv1.ListCheckpointsResponse{Checkpoints: make([]*trellisv1.Checkpoint, 0, len(list))}
	for _, c := range list {
		out.Checkpoints = append(out.Checkpoints, checkpointProto(c))
	}
	return out, nil
}

func checkpointProto(c store.Checkpoint) *trellisv1.Checkpoint {
	var skipped []workspace.Skip
	_ = json.Unmarshal(c.Skipped, &skipped) // the store keeps what record wrote
	return &trellisv1.Checkpoint{
		CheckpointId: c.CheckpointID, Seq: c.Seq, Reason: c.Reason, TurnId: optionalString(c.TurnID),
		Tool: optionalString(c.Tool), CallId: optionalString(c.CallID), Files: int32(c.Files), Bytes: c.Bytes,
		Skipped: skipsProto(skipped), CreatedAt: FormatTime(c.CreatedAt),
	}
}

func skipsProto(skipped []workspace.Skip) []*trellisv1.CheckpointSkip {
	out := make([]*trellisv1.CheckpointSkip, 0, len(skipped))
	for _, sk := range skipped {
		out = append(out, &trellisv1.CheckpointSkip{Path: sk.Path, Reason: sk.Reason, Size: sk.Size})
	}
	return out
}

func optionalString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// DiffCheckpoints diffs two checkpoints, or one and the current files.
func (s *CheckpointServer) DiffCheckpoints(ctx context.Context, req *trellisv1.DiffCheckpointsRequest) (*trellisv1.DiffCheckpointsResponse, error) {
	changes, err := s.sessions.DiffCheckpoints(ctx, req.GetSessionId(), req.GetFrom(), req.To)
	if err != nil {
		return nil, err
	}
	out := &trellisv1.DiffCheckpointsResponse{Files: make([]*trellisv1.CheckpointChange, 0, len(changes))}
	diff := workspace.Unified(changes)
	if len(diff) > maxDiffBytes {
		diff, out.Truncated = diff[:maxDiffBytes], true
	}
	out.Diff = diff
	for _, c := range changes {
		out.Files = append(out.Files, &trellisv1.CheckpointChange{Path: c.Path, Status: c.Status, Kind: c.Kind})
	}
	return out, nil
}

// RestoreCheckpoint puts a checkpoint back into the session's workdir.
func (s *CheckpointServer) RestoreCheckpoint(ctx context.Context, req *trellisv1.RestoreCheckpointRequest) (*trellisv1.RestoreCheckpointResponse, error) {
	res, err := s.sessions.RestoreCheckpoint(ctx, req.GetSessionId(), req.GetCheckpointId(), req.GetForce())
	if err != nil {
		return nil, err
	}
	return &trellisv1.RestoreCheckpointResponse{CheckpointId: res.CheckpointID, Written: int32(res.Written),
		Removed: int32(res.Removed), Kept: skipsProto(res.Kept)}, nil
}

// DeleteCheckpoint deletes one checkpoint.
func (s *CheckpointServer) DeleteCheckpoint(ctx context.Context, req *trellisv1.DeleteCheckpointRequest) (*trellisv1.DeleteCheckpointResponse, error) {
	if err := s.sessions.DeleteCheckpoint(ctx, req.GetSessionId(), req.GetCheckpointId()); err != nil {
		return nil, err
	}
	return &trellisv1.DeleteCheckpointResponse{Ok: true}, nil
}
