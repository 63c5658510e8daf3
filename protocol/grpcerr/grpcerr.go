package grpcerr

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trellis-run/trellis/protocol/errcode"
)

// DefaultRetryAfterMs is the retryAfterMs given with an overloaded error that
// did not say when to retry.
const DefaultRetryAfterMs = 100

// fixedMessage replaces gRPC's own text, which names internal services or
// addresses, for the fallbacks whose text is not written for people.
var fixedMessage = map[codes.Code]string{
	codes.Unavailable:   "the runtime is unavailable; retry later",
	codes.Unimplemented: "this method is not implemented by the runtime",
}

// numericMetadata lists the ErrorInfo metadata keys whose values are numbers
// on the wire (ErrorInfo metadata is a string map).
var numericMetadata = map[string]bool{
	"retryAfterMs": true,
	"limit":        true,
	"size":         true,
	"queueLength":  true,
	"status":       true,
	"lastSeq":      true,
}

// Mapper turns errors from gRPC calls into JSON-RPC errors. The zero value is
// ready: it logs with slog.Default and draws random error ids.
type Mapper struct {
	// Log receives internal errors with their id; nil means slog.Default().
	Log *slog.Logger
	// NewErrorID returns the id of a masked internal error; nil means
	// "e-" + 16 random hex digits. Tests inject a deterministic one.
	NewErrorID func() string
}

// Default is the Mapper used by FromError.
var Default = &Mapper{}

// FromError maps err with Default.
func FromError(ctx context.Context, err error) *errcode.Error { return Default.FromError(ctx, err) }

// FromError maps err to a JSON-RPC error: an *errcode.Error passes through; a gRPC
// status with a Trellis ErrorInfo keeps its reason as data.code and its
// metadata in data; a status without one is mapped by its gRPC code; anything
// else, and every internal error, is masked with data.errorId and logged.
// A nil err gives nil.
func (m *Mapper) FromError(ctx context.Context, err error) *errcode.Error {
	if err == nil {
		return nil
	}
	var e *errcode.Error
	if errors.As(err, &e) {
		return e
	}
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			st = status.FromContextError(err)
		} else {
			return m.Internal(ctx, err)
		}
	}
	if info := trellisInfo(st); info != nil {
		return m.fromInfo(ctx, st, info)
	}
	if e := sizeError(st); e != nil {
		return e
	}
	code, ok := errcode.FromGRPC(rpccode.Code(st.Code()))
	if !ok {
		return m.Internal(ctx, err)
	}
	msg := st.Message()
	if fixed, ok := fixedMessage[st.Code()]; ok {
		msg = fixed
		m.log().LogAttrs(ctx, slog.LevelWarn, "gRPC call failed",
			slog.String("grpcCode", st.Code().String()), slog.String("error", st.Message()))
	}
	out := errcode.New(code, "%s", msg)
	if code == errcode.Overloaded {
		out.WithData("retryAfterMs", int64(DefaultRetryAfterMs))
	}
	return out
}

func (m *Mapper) fromInfo(ctx context.Context, st *status.Status, info *errdetails.ErrorInfo) *errcode.Error {
	if info.Reason == errcode.Internal {
		// The runtime masks its internal errors itself and logs them under
		// the errorId it sends; its message is safe to show. Anything else
		// is masked here.
		if id := info.Metadata["errorId"]; id != "" {
			return errcode.New(errcode.Internal, "%s", st.Message()).WithData("errorId", id)
		}
		return m.Internal(ctx, st.Err())
	}
	out := errcode.New(info.Reason, "%s", st.Message())
	for k, v := range info.Metadata {
		if numericMetadata[k] {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				out.WithData(k, n)
				continue
			}
		}
		out.WithData(k, v)
	}
	if info.Reason == errcode.Overloaded {
		if _, ok := out.Data["retryAfterMs"]; !ok {
			out.WithData("retryAfterMs", int64(DefaultRetryAfterMs))
		}
	}
	return out
}

// trellisInfo returns the status's ErrorInfo detail of the Trellis domain.
func trellisInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == errcode.Domain && info.Reason != "" {
			return info
		}
	}
	return nil
}

// Internal masks err: the client sees a constant message and data.errorId;
// the log line carrying the same id has the real error.
func (m *Mapper) Internal(ctx context.Context, err error) *errcode.Error {
	id := m.newErrorID()
	m.log().LogAttrs(ctx, slog.LevelError, "internal error",
		slog.String("errorId", id), slog.Any("error", err))
	return errcode.New(errcode.Internal, "internal error (id %s)", id).WithData("errorId", id)
}

func (m *Mapper) log() *slog.Logger {
	if m.Log != nil {
		return m.Log
	}
	return slog.Default()
}

func (m *Mapper) newErrorID() string {
	if m.NewErrorID != nil {
		return m.NewErrorID()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "e-" + hex.EncodeToString(b[:])
}

// sizeError recognises gRPC's own message-size refusals ("grpc: received
// message larger than max (N vs. LIMIT)", "trying to send message larger
// than max ..."): a retry of the same payload fails the same way, so they
// are payload_too_large with data.limit, never overloaded.
func sizeError(st *status.Status) *errcode.Error {
	if st.Code() != codes.ResourceExhausted {
		return nil
	}
	msg := st.Message()
	i := strings.Index(msg, "message larger than max (")
	if i < 0 {
		return nil
	}
	var size, limit int64
	if _, err := fmt.Sscanf(msg[i+len("message larger than max ("):], "%d vs. %d)", &size, &limit); err != nil {
		return errcode.New(errcode.PayloadTooLarge, "a message exceeds the size limit: %s; send less (page through results, split the input)", msg)
	}
	what := "the request"
	if strings.Contains(msg, "send") {
		what = "the reply"
	}
	return errcode.New(errcode.PayloadTooLarge, "%s is %d bytes, over the limit of %d bytes; send less (page through results with a smaller limit, split the input)", what, size, limit).
		WithData("limit", limit).WithData("size", size)
}
