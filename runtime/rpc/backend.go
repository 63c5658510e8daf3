package rpc

import (
	"context"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/session"
)

// BackendServer implements trellisv1.BackendServiceServer.
type BackendServer struct {
	trellisv1.UnsafeBackendServiceServer
	sessions *session.Service
}

// NewBackendServer returns the backend service.
func NewBackendServer(sessions *session.Service) *BackendServer {
	return &BackendServer{sessions: sessions}
}

// SetBackend sets where a session's tools run.
func (s *BackendServer) SetBackend(ctx context.Context, req *trellisv1.SetBackendRequest) (*trellisv1.SetBackendResponse, error) {
	if err := s.sessions.SetBackend(ctx, req.GetSessionId(), req.GetKind(), req.GetConfig().AsMap()); err != nil {
		return nil, err
	}
	return &trellisv1.SetBackendResponse{Ok: true}, nil
}
