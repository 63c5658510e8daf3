package rpc

import (
	"context"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/memory"
)

// MemoryServer implements trellisv1.MemoryServiceServer over the note memory.
type MemoryServer struct {
	trellisv1.UnsafeMemoryServiceServer
	memory *memory.Service
}

// NewMemoryServer returns the memory service.
func NewMemoryServer(m *memory.Service) *MemoryServer {
	return &MemoryServer{memory: m}
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
