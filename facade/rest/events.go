package rest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/trellis-run/trellis/facade/wire"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/protocol/grpcerr"
)

const (
	// keepaliveEvery is how often an SSE stream gets a comment line, so
	// that proxies and EventSource see a live connection.
	keepaliveEvery = 15 * time.Second
	// writeTimeout bounds one write to a client; a client that reads
	// nothing for that long is dropped.
	writeTimeout = 30 * time.Second
	// pending is how many items the runtime's stream may run ahead of the
	// client's writes.
	pending = 256
)

// Events returns the handler of GET /v1/sessions/{id}/events
// (WIRE-FORMATS.md): a session's event log in one format, replayed from
// afterSeq and then followed live.
//
//	?format=events|wire|pi  (default events; "json" is pi)
//	?afterSeq=N             (default 0; events with seq > N)
//	?follow=true|false      (default true; false ends once what is stored was sent)
//	Accept: text/event-stream   SSE (id: <seq>, one data: line per line;
//	                            Last-Event-ID resumes and overrides afterSeq)
//	otherwise                   NDJSON, chunked (application/x-ndjson)
//
// cc must carry the daemon's token: this handler checks the caller's Bearer
// token itself and reads the log with SessionService.Subscribe (and
// ListSessions, for the pi header's cwd).
//
// The wire and pi renderings are stateful over a run, so for them the log is
// replayed from the session's first event and only the lines of events after
// afterSeq are sent: a stream resumed in the middle of a run continues
// exactly as an unbroken one would have. (A pi stream resumed with
// Last-Event-ID does not repeat the session header; one started with afterSeq
// is a new stream and does.)
func Events(cc grpc.ClientConnInterface, token string, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	return RequireBearer(token, newEventStream(trellisv1.NewSessionServiceClient(cc), log, keepaliveEvery))
}

func newEventStream(sessions sessionClient, log *slog.Logger, keepalive time.Duration) *eventStream {
	return &eventStream{
		sessions: sessions, mapper: &grpcerr.Mapper{Log: log}, log: log, keepalive: keepalive,
		shutdown: map[*http.Server]chan struct{}{},
	}
}

// sessionClient is what the handler uses of SessionService.
type sessionClient interface {
	Subscribe(ctx context.Context, in *trellisv1.SubscribeRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[trellisv1.SubscribeResponse], error)
	ListSessions(ctx context.Context, in *trellisv1.ListSessionsRequest, opts ...grpc.CallOption) (*trellisv1.ListSessionsResponse, error)
}

type eventStream struct {
	sessions  sessionClient
	mapper    *grpcerr.Mapper
	log       *slog.Logger
	keepalive time.Duration

	mu       sync.Mutex
	shutdown map[*http.Server]chan struct{} // closed when that server shuts down
}

// stopping returns a channel closed when the server serving r shuts down.
// http.Server.Shutdown waits for running handlers and has no way to tell
// them; a followed stream would hold it until its deadline, so streams end
// on their own when it starts.
func (h *eventStream) stopping(r *http.Request) <-chan struct{} {
	srv, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
	if srv == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ch, ok := h.shutdown[srv]
	if !ok {
		ch = make(chan struct{})
		h.shutdown[srv] = ch
		srv.RegisterOnShutdown(func() { close(ch) })
	}
	return ch
}

// eventsRequest is a parsed request.
type eventsRequest struct {
	sessionID string
	format    wire.Format
	afterSeq  int64
	follow    bool
	sse       bool
	resumed   bool // Last-Event-ID: the client continues a stream it had
}

// httpError is an error answer: its status and JSON-RPC style body.
type httpError struct {
	status int
	body   *errcode.Error
}

func (e *httpError) Error() string { return e.body.Error() }

func badRequest(format string, args ...any) *httpError {
	return &httpError{http.StatusBadRequest, errcode.New(errcode.InvalidParams, format, args...)}
}

func parseEventsRequest(r *http.Request) (eventsRequest, *httpError) {
	q := r.URL.Query()
	req := eventsRequest{sessionID: r.PathValue("id"), format: wire.FormatEvents, follow: true, sse: acceptsSSE(r.Header.Values("Accept"))}
	if v := q.Get("format"); v != "" {
		f, err := wire.ParseFormat(v)
		if err != nil {
			return req, badRequest("format must be events, wire or pi (got %q)", v)
		}
		req.format = f
	}
	if v := q.Get("afterSeq"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return req, badRequest("afterSeq must be an integer, 0 or more (got %q)", v)
		}
		req.afterSeq = n
	}
	if v := q.Get("follow"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return req, badRequest("follow must be true or false (got %q)", v)
		}
		req.follow = b
	}
	if v := strings.TrimSpace(r.Header.Get("Last-Event-ID")); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return req, badRequest("Last-Event-ID must be the seq of an event (got %q)", v)
		}
		req.afterSeq, req.resumed = n, true
	}
	return req, nil
}

// acceptsSSE reports whether an Accept header asks for text/event-stream.
func acceptsSSE(accept []string) bool {
	for _, h := range accept {
		for _, part := range strings.Split(h, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "text/event-stream" {
				return true
			}
		}
	}
	return false
}

func (h *eventStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, herr := parseEventsRequest(r)
	if herr != nil {
		writeError(w, herr)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	// Renderings other than events need each run from its start: replay the
	// session and drop the lines of events the client already has.
	from := req.afterSeq
	if req.format != wire.FormatEvents {
		from = 0
	}
	stream, err := h.sessions.Subscribe(ctx, &trellisv1.SubscribeRequest{SessionId: req.sessionID, AfterSeq: from})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// The first item proves the session exists (else: not_found) before the
	// response starts.
	first, err := stream.Recv()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var hdr wire.Header
	if req.format == wire.FormatPi {
		if hdr, err = h.header(ctx, req.sessionID); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	enc, err := wire.NewEncoder(req.format, hdr)
	if err != nil {
		h.fail(w, r, err)
		return
	}

	out := newLineWriter(w, req.sse)
	out.start()
	if !req.resumed {
		begin, err := enc.Begin()
		if err != nil {
			h.log.Error("event stream: begin", "sessionId", req.sessionID, "err", err)
			return
		}
		if out.lines(begin, 0) != nil {
			return
		}
	}

	items := make(chan *trellisv1.SubscribeResponse, pending)
	errc := make(chan error, 1)
	go func() {
		defer close(items)
		for {
			resp, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case items <- resp:
			case <-ctx.Done():
				errc <- ctx.Err()
				return
			}
		}
	}()
	var tick <-chan time.Time
	if req.sse {
		t := time.NewTicker(h.keepalive)
		defer t.Stop()
		tick = t.C
	}

	stop := h.stopping(r)
	item := first
	for {
		if item != nil {
			done, err := h.send(out, enc, req, item)
			if err != nil || done {
				return
			}
			if len(items) == 0 && out.flush() != nil {
				return
			}
		}
		item = nil
		select {
		case resp, ok := <-items:
			if !ok {
				h.ended(ctx, req, <-errc)
				return
			}
			item = resp
		case <-tick:
			if out.comment("keepalive") != nil {
				return
			}
		case <-stop:
			// The daemon is stopping: a followed stream ends cleanly (an
			// EventSource reconnects), an unfinished replay does not.
			_ = out.flush()
			if !req.follow {
				panic(http.ErrAbortHandler)
			}
			return
		case <-ctx.Done():
			return
		}
	}
}

// send writes the lines of one item of the runtime's stream. done is true
// once the stream must end: follow=false and the stored events were sent.
func (h *eventStream) send(out *lineWriter, enc wire.Encoder, req eventsRequest, item *trellisv1.SubscribeResponse) (done bool, err error) {
	if item.GetCaughtUp() != nil {
		if req.follow {
			return false, nil
		}
		return true, out.flush()
	}
	page := item.GetEvents()
	if page == nil {
		return false, nil
	}
	objs, err := codec.PageObjects(page, nil)
	if err != nil {
		return false, err
	}
	for i, obj := range objs {
		seq := page.GetSeqs()[i]
		// A lease_lost notice (retracted) is not the log's event at its
		// seq: a client that reconnects with its id resumes before it.
		id := seq
		if codec.IsRetracted(obj) {
			id = seq - 1
		}
		if req.format == wire.FormatEvents {
			if seq > req.afterSeq {
				// The stored object is the line: no decoding, no re-encoding.
				if err := out.lines([][]byte{append(obj, '\n')}, id); err != nil {
					return false, err
				}
			}
			continue
		}
		ev, err := events.DecodeEventLine(obj)
		if err != nil {
			h.log.Warn("event stream: skipping an event", "sessionId", req.sessionID, "seq", seq, "err", err)
			continue
		}
		lines, err := enc.Encode(ev)
		if err != nil {
			h.log.Warn("event stream: skipping an event", "sessionId", req.sessionID, "seq", ev.Seq, "kind", ev.Kind, "err", err)
			continue
		}
		if ev.Seq <= req.afterSeq {
			continue // rendered for its run's sake; the client has it
		}
		if err := out.lines(lines, id); err != nil {
			return false, err
		}
	}
	return false, nil
}

// ended handles the end of the runtime's stream after the response started.
// A response with follow=false ends cleanly only once complete, so the
// client must not mistake a broken stream for a whole one: it is aborted.
func (h *eventStream) ended(ctx context.Context, req eventsRequest, err error) {
	if ctx.Err() != nil {
		return // the client left
	}
	if errors.Is(err, io.EOF) && req.follow {
		return // the runtime closed the stream: it is stopping
	}
	h.log.Warn("event stream: the runtime's stream ended early", "sessionId", req.sessionID, "err", err)
	panic(http.ErrAbortHandler)
}

// header reads what the pi session header needs.
func (h *eventStream) header(ctx context.Context, id string) (wire.Header, error) {
	res, err := h.sessions.ListSessions(ctx, &trellisv1.ListSessionsRequest{IncludeClosed: ptr(true)})
	if err != nil {
		return wire.Header{}, err
	}
	for _, s := range res.GetSessions() {
		if s.GetSessionId() != id {
			continue
		}
		created, err := time.Parse(time.RFC3339Nano, s.GetCreatedAt())
		if err != nil {
			return wire.Header{}, fmt.Errorf("session %s: created_at %q: %w", id, s.GetCreatedAt(), err)
		}
		return wire.Header{SessionID: id, Timestamp: created, Cwd: s.GetWorkdir(), Provider: s.GetProvider(), Model: s.GetModel()}, nil
	}
	return wire.Header{}, &httpError{http.StatusNotFound, errcode.New(errcode.NotFound, "no session %s", id)}
}

func ptr[T any](v T) *T { return &v }

// fail answers err before the response started, like the REST errors: the
// HTTP status of its gRPC code and a JSON-RPC error object.
func (h *eventStream) fail(w http.ResponseWriter, r *http.Request, err error) {
	var herr *httpError
	if errors.As(err, &herr) {
		writeError(w, herr)
		return
	}
	if r.Context().Err() != nil {
		return // the client left
	}
	code := http.StatusInternalServerError
	if st, ok := status.FromError(err); ok {
		code = runtime.HTTPStatusFromCode(st.Code())
	}
	writeError(w, &httpError{code, h.mapper.FromError(r.Context(), err)})
}

func writeError(w http.ResponseWriter, e *httpError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(e.body)
}

// lineWriter writes rendered lines as NDJSON or SSE.
type lineWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	sse bool
}

func newLineWriter(w http.ResponseWriter, sse bool) *lineWriter {
	return &lineWriter{w: w, rc: http.NewResponseController(w), sse: sse}
}

// start sends the response header.
func (l *lineWriter) start() {
	h := l.w.Header()
	if l.sse {
		h.Set("Content-Type", "text/event-stream")
	} else {
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	l.w.WriteHeader(http.StatusOK)
	_ = l.flush()
}

// lines writes the lines of the event seq (0: lines of no event, such as the
// pi header). In SSE each line is one event; the last line of an event
// carries id: <seq>, so a client that reconnects with Last-Event-ID resumes
// after the last event it received whole.
func (l *lineWriter) lines(lines [][]byte, seq int64) error {
	if len(lines) == 0 {
		return nil
	}
	l.deadline()
	for i, line := range lines {
		var err error
		if l.sse {
			var b []byte
			if seq > 0 && i == len(lines)-1 {
				b = fmt.Appendf(b, "id: %d\n", seq)
			}
			b = append(b, "data: "...)
			b = append(b, strings.TrimSuffix(string(line), "\n")...)
			b = append(b, "\n\n"...)
			_, err = l.w.Write(b)
		} else {
			_, err = l.w.Write(line)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// comment writes an SSE comment line and flushes it.
func (l *lineWriter) comment(text string) error {
	l.deadline()
	if _, err := io.WriteString(l.w, ": "+text+"\n\n"); err != nil {
		return err
	}
	return l.flush()
}

func (l *lineWriter) flush() error {
	l.deadline()
	if err := l.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

func (l *lineWriter) deadline() {
	_ = l.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
}
