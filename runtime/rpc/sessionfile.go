package rpc

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// exportChunk is the most bytes of the file one ExportSession message
// carries.
const exportChunk = 1 << 20

// ArchiveSession makes a session read-only.
func (s *SessionServer) ArchiveSession(ctx context.Context, req *trellisv1.ArchiveSessionRequest) (*trellisv1.ArchiveSessionResponse, error) {
	if err := s.sessions.Archive(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	return &trellisv1.ArchiveSessionResponse{}, nil
}

// UnarchiveSession makes an archived session writable again.
func (s *SessionServer) UnarchiveSession(ctx context.Context, req *trellisv1.UnarchiveSessionRequest) (*trellisv1.UnarchiveSessionResponse, error) {
	if err := s.sessions.Unarchive(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	return &trellisv1.UnarchiveSessionResponse{}, nil
}

// ExportSession streams the session's portable file in chunks.
func (s *SessionServer) ExportSession(req *trellisv1.ExportSessionRequest, stream grpc.ServerStreamingServer[trellisv1.ExportSessionResponse]) error {
	_, err := s.sessions.Export(stream.Context(), req.GetSessionId(), chunkSender{stream})
	return err
}

// chunkSender sends what is written to it as ExportSession messages.
type chunkSender struct {
	stream grpc.ServerStreamingServer[trellisv1.ExportSessionResponse]
}

func (c chunkSender) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), exportChunk)
		if err := c.stream.Send(&trellisv1.ExportSessionResponse{Data: p[:k]}); err != nil {
			return n, err
		}
		n, p = n+k, p[k:]
	}
	return n, nil
}

// ImportSession creates a session from the file the client streams.
func (s *SessionServer) ImportSession(stream grpc.ClientStreamingServer[trellisv1.ImportSessionRequest, trellisv1.ImportSessionResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	r := &chunkReader{stream: stream, eof: errors.Is(err, io.EOF)}
	if first != nil {
		r.buf = first.GetData()
	}
	sess, n, err := s.sessions.Import(ctx, r, first.GetSessionId(), ownerOf(ctx))
	if err != nil {
		return err
	}
	return stream.SendAndClose(&trellisv1.ImportSessionResponse{
		SessionId: sess.SessionID, Events: int64(n.Events), History: int64(n.History),
		Blobs: int64(n.Blobs), Checkpoints: int64(n.Checkpoints),
	})
}

// chunkReader reads the data of ImportSession's messages in order.
type chunkReader struct {
	stream grpc.ClientStreamingServer[trellisv1.ImportSessionRequest, trellisv1.ImportSessionResponse]
	buf    []byte
	eof    bool
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.eof {
			return 0, io.EOF
		}
		m, err := r.stream.Recv()
		if errors.Is(err, io.EOF) {
			r.eof = true
			continue
		}
		if err != nil {
			return 0, err
		}
		r.buf = m.GetData()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}
