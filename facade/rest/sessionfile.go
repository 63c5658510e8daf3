package rest

import (
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/grpcerr"
)

// FileType is the media type of a portable session file (docs/export.md).
const FileType = "application/vnd.trellis.session+jsonl"

// importChunk is the most bytes of an uploaded file one ImportSession
// message carries.
const importChunk = 1 << 20

// Export returns the handler of GET /v1/sessions/{id}/export: the
// session's portable file (docs/export.md), streamed from
// SessionService.ExportSession as the store is read. An error before the
// first byte is a JSON error with its HTTP status; one after it cuts the
// response short (the file then lacks its trailer, which import refuses).
func Export(cc grpc.ClientConnInterface, token string, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	sessions := trellisv1.NewSessionServiceClient(cc)
	mapper := &grpcerr.Mapper{Log: log}
	return RequireBearer(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		stream, err := sessions.ExportSession(r.Context(), &trellisv1.ExportSessionRequest{SessionId: id})
		var first *trellisv1.ExportSessionResponse
		if err == nil {
			first, err = stream.Recv()
		}
		if err != nil {
			failRPC(w, r, mapper, err)
			return
		}
		w.Header().Set("Content-Type", FileType)
		w.Header().Set("Content-Disposition", `attachment; filename="`+id+`.trellis-session.jsonl"`)
		for m := first; ; {
			if _, err := w.Write(m.GetData()); err != nil {
				return // the client left
			}
			if m, err = stream.Recv(); errors.Is(err, io.EOF) {
				return
			} else if err != nil {
				log.Warn("session export cut short", "session", id, "err", err)
				panic(http.ErrAbortHandler)
			}
		}
	}))
}

// Import returns the handler of POST /v1/sessions/import: the body is a
// portable session file, streamed to SessionService.ImportSession;
// ?sessionId= imports it under a new id. It answers ImportSessionResponse
// as JSON.
func Import(cc grpc.ClientConnInterface, token string, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	sessions := trellisv1.NewSessionServiceClient(cc)
	mapper := &grpcerr.Mapper{Log: log}
	return RequireBearer(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stream, err := sessions.ImportSession(r.Context())
		if err != nil {
			failRPC(w, r, mapper, err)
			return
		}
		first := &trellisv1.ImportSessionRequest{}
		if id := r.URL.Query().Get("sessionId"); id != "" {
			first.SessionId = &id
		}
		buf := make([]byte, importChunk)
		for {
			n, rerr := io.ReadFull(r.Body, buf)
			if n > 0 || first != nil {
				m := &trellisv1.ImportSessionRequest{Data: buf[:n]}
				if first != nil {
					first.Data, m, first = buf[:n], first, nil
				}
				if err := stream.Send(m); err != nil {
					break // the server ended the call: CloseAndRecv has its error
				}
			}
			if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
				break
			}
			if rerr != nil {
				failRPC(w, r, mapper, badRequest("the upload was cut short: %v", rerr))
				return
			}
		}
		res, err := stream.CloseAndRecv()
		if err != nil {
			failRPC(w, r, mapper, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(codec.Marshal(res))
	}))
}

// failRPC answers err, an *httpError or a call's gRPC status, as a JSON
// error with its HTTP status.
func failRPC(w http.ResponseWriter, r *http.Request, mapper *grpcerr.Mapper, err error) {
	var herr *httpError
	if errors.As(err, &herr) {
		writeError(w, herr)
		return
	}
	code := http.StatusInternalServerError
	if st, ok := status.FromError(err); ok {
		code = runtime.HTTPStatusFromCode(st.Code())
	}
	writeError(w, &httpError{code, mapper.FromError(r.Context(), err)})
}
