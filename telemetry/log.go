package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"
)

// Keys of the ids a log line carries.
const (
	LogRequestID = "requestId"
	LogTurnID    = "turnId"
	LogTraceID   = "traceId"
	LogSpanID    = "spanId"
)

type ctxKey int

const (
	requestKey ctxKey = iota
	turnKey
)

// WithRequestID returns ctx carrying the id of the client call it serves.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestKey, id)
}

// RequestID is the client call id of ctx, "" if none.
func RequestID(ctx context.Context) string { s, _ := ctx.Value(requestKey).(string); return s }

// WithTurnID returns ctx carrying the id of the turn it runs.
func WithTurnID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, turnKey, id)
}

// TurnID is the turn id of ctx, "" if none.
func TurnID(ctx context.Context) string { s, _ := ctx.Value(turnKey).(string); return s }

// LogHandler wraps h so that every record logged with a context carries the
// context's request id, turn id and trace and span ids (when it has them
// and the line does not already say them).
func LogHandler(h slog.Handler) slog.Handler { return &ctxHandler{inner: h} }

type ctxHandler struct {
	inner slog.Handler
	has   map[string]bool // id keys already added by WithAttrs
	group bool            // inside WithGroup: ids would land in the group
}

func (h *ctxHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h *ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx == nil || h.group {
		return h.inner.Handle(ctx, r)
	}
	var ids [4]slog.Attr
	n := 0
	add := func(key, val string) {
		if val == "" || h.has[key] {
			return
		}
		present := false
		r.Attrs(func(a slog.Attr) bool {
			present = a.Key == key
			return !present
		})
		if !present {
			ids[n] = slog.String(key, val)
			n++
		}
	}
	add(LogRequestID, RequestID(ctx))
	add(LogTurnID, TurnID(ctx))
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		add(LogTraceID, sc.TraceID().String())
		add(LogSpanID, sc.SpanID().String())
	}
	if n > 0 {
		r = r.Clone()
		r.AddAttrs(ids[:n]...)
	}
	return h.inner.Handle(ctx, r)
}

func (h *ctxHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := &ctxHandler{inner: h.inner.WithAttrs(attrs), has: h.has, group: h.group}
	copied := false
	for _, a := range attrs {
		switch a.Key {
		case LogRequestID, LogTurnID, LogTraceID, LogSpanID:
			if h.group {
				continue
			}
			if !copied {
				out.has = make(map[string]bool, len(h.has)+1)
				for k := range h.has {
					out.has[k] = true
				}
				copied = true
			}
			out.has[a.Key] = true
		}
	}
	return out
}

// WithGroup: the ids would land inside the group, where nobody looks for
// them, so a grouped logger does not add them.
func (h *ctxHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &ctxHandler{inner: h.inner.WithGroup(name), has: h.has, group: true}
}

// MDRequestID is the gRPC metadata key that carries a client call's
// request id from the facade to the runtime.
const MDRequestID = "trellis-request-id"

// NewRequestID returns a new request id.
func NewRequestID() string { return fmt.Sprintf("rq-%016x", rand.Uint64()) }
