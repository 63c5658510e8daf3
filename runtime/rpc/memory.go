package rpc

import (
	"context"
	"errors"
	"time"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/memory"
	"github.com/trellis-run/trellis/runtime/store"
)

// MemoryServer implements trellisv1.MemoryServiceServer over the note memory.
type MemoryServer struct {
	trellisv1.UnsafeMemoryServiceServer
	memory   *memory.Service
	sessions SessionLookup
}

// SessionLookup finds a session by id (store.ErrNotFound when unknown).
type SessionLookup interface {
	GetSession(ctx context.Context, sessionID string) (store.Session, error)
}

// NewMemoryServer returns the memory service; sessions checks the
// sessionId of memory.list.
func NewMemoryServer(m *memory.Service, sessions SessionLookup) *MemoryServer {
	return &MemoryServer{memory: m, sessions: sessions}
}

// WriteMemory stores a note.
func (s *MemoryServer) WriteMemory(ctx context.Context, req *trellisv1.WriteMemoryRequest) (*trellisv1.WriteMemoryResponse, error) {
	id, err := s.memory.Write(ctx, req.GetText(), req.GetTags(), req.GetNamespace())
	if err != nil {
		return nil, err
	}
	return &trellisv1.WriteMemoryResponse{Id: id}, nil
}

// SearchMemory returns the most relevant notes first.
func (s *MemoryServer) SearchMemory(ctx context.Context, req *trellisv1.SearchMemoryRequest) (*trellisv1.SearchMemoryResponse, error) {
	limit := 0 // the default
	if req.Limit != nil {
		if req.GetLimit() < 1 {
			return nil, errs.New(errcode.InvalidParams, "limit %d is out of range: it must be between 1 and %d", req.GetLimit(), memory.MaxLimit)
		}
		limit = int(req.GetLimit())
	}
	hits, err := s.memory.Search(ctx, req.GetQuery(), limit, req.GetNamespace())
	if err != nil {
		return nil, err
	}
	out := &trellisv1.SearchMemoryResponse{Hits: make([]*trellisv1.MemoryHit, 0, len(hits))}
	for _, h := range hits {
		tags := h.Tags
		if tags == nil {
			tags = []string{}
		}
		out.Hits = append(out.Hits, &trellisv1.MemoryHit{
			Id: h.ID, Text: h.Text, Tags: tags, Score: h.Score, Namespace: h.Namespace,
		})
	}
	return out, nil
}

// ListMemory lists notes newest first, or those matching query best first.
func (s *MemoryServer) ListMemory(ctx context.Context, req *trellisv1.ListMemoryRequest) (*trellisv1.ListMemoryResponse, error) {
	if id := req.GetSessionId(); id != "" {
		if _, err := s.sessions.GetSession(ctx, id); errors.Is(err, store.ErrNotFound) {
			return nil, errs.New(errcode.NotFound, "session %s not found", id)
		} else if err != nil {
			return nil, err
		}
	}
	namespace := ""
	switch scope := req.GetScope(); scope {
	case "", "all":
	case "global":
		namespace = memory.DefaultNamespace
	default:
		return nil, errs.NewUnsupported("scope", scope, "scope %q is not supported: Trellis notes live in namespaces, not per project or agent; list \"all\" or one namespace", scope)
	}
	if req.Namespace != nil {
		namespace = req.GetNamespace()
	}
	limit := 0 // the default
	if req.Limit != nil {
		if req.GetLimit() < 1 {
			return nil, errs.New(errcode.InvalidParams, "limit %d is out of range: it must be between 1 and %d", req.GetLimit(), memory.MaxLimit)
		}
		limit = int(req.GetLimit())
	}
	ms, err := s.memory.List(ctx, req.GetQuery(), namespace, limit)
	if err != nil {
		return nil, err
	}
	out := &trellisv1.ListMemoryResponse{Entries: make([]*trellisv1.MemoryEntry, 0, len(ms))}
	for _, m := range ms {
		out.Entries = append(out.Entries, &trellisv1.MemoryEntry{
			Id: m.ID, Text: m.Text, Tags: m.StoredTags(), Namespace: m.Namespace,
			CreatedAt: m.CreatedAt.UTC().Format(time.RFC3339Nano), Scope: "global",
		})
	}
	return out, nil
}

// DeleteMemory forgets one note.
func (s *MemoryServer) DeleteMemory(ctx context.Context, req *trellisv1.DeleteMemoryRequest) (*trellisv1.DeleteMemoryResponse, error) {
	if src := req.GetSource(); src != "" {
		return nil, errs.NewUnsupported("source", src, "source %q is not supported: Trellis keeps no browsing memories; forget a note by its id", src)
	}
	if req.Url != nil || req.Before != nil {
		return nil, errs.New(errcode.InvalidParams, "url and before go with source, which Trellis does not support; forget a note by its id")
	}
	if err := s.memory.Delete(ctx, req.GetId()); err != nil {
		return nil, err
	}
	return &trellisv1.DeleteMemoryResponse{Ok: true}, nil
}
