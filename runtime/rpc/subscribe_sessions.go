package rpc

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/store"
)

// MaxWatchesPerStream bounds the open watches of one SubscribeSessions
// stream (the facade's one stream carries every session its connections
// watch: 20,000 connections × a few sessions each fit). A watch past it
// ends at once with overloaded; the others go on.
const MaxWatchesPerStream = 1 << 17

// SubscribeSessions streams the events of many sessions on one stream. The
// handler's goroutine sends; one more goroutine reads the requests. Each
// watch is an event log cursor (no goroutine of its own) whose notify puts
// the watch on a ready queue; the send loop takes ready watches in turn,
// reads at most one message's worth of each (a page of about 1 MiB) and
// puts it back while it has more, so one busy session never holds up the
// others. Two goroutines per stream, whatever the number of watches.
func (s *SessionServer) SubscribeSessions(stream grpc.BidiStreamingServer[trellisv1.SubscribeSessionsRequest, trellisv1.SubscribeSessionsResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	m := &mux{watches: map[uint64]*muxWatch{}, signal: make(chan struct{}, 1), page: newEventPage("")}
	defer m.page.release()
	defer m.closeAll()
	recvErr := make(chan error, 1)
	go func() { recvErr <- s.receiveWatches(ctx, stream, m) }()
	done := false // the client sends no more requests
	for {
		item, w := m.next()
		switch {
		case item != nil:
			if err := stream.Send(item); err != nil {
				return err
			}
		case w != nil:
			if err := s.sendWatch(ctx, stream, m, w); err != nil {
				return err
			}
		default:
			if done && m.open() == 0 {
				// Half-closed and no watch left: nothing more can come.
				return nil
			}
			select {
			case <-m.signal:
			case err := <-recvErr:
				if err != nil {
					return err
				}
				done, recvErr = true, nil // the open watches go on
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// receiveWatches reads the stream's requests until the client half-closes
// (nil) or the stream fails.
func (s *SessionServer) receiveWatches(ctx context.Context, stream grpc.BidiStreamingServer[trellisv1.SubscribeSessionsRequest, trellisv1.SubscribeSessionsResponse], m *mux) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch op := req.GetOp().(type) {
		case *trellisv1.SubscribeSessionsRequest_Watch:
			s.watch(ctx, m, op.Watch)
		case *trellisv1.SubscribeSessionsRequest_Unwatch:
			m.unwatch(op.Unwatch.GetWatchId())
		default:
			m.control(&trellisv1.SubscribeSessionsResponse{Item: ended(errs.New(errcode.InvalidParams,
				"a SubscribeSessions request needs watch or unwatch"))})
		}
	}
}

// watch opens one watch, or answers why it cannot (ended).
func (s *SessionServer) watch(ctx context.Context, m *mux, req *trellisv1.WatchSession) {
	id, sessionID := req.GetWatchId(), req.GetSessionId()
	refuse := func(err error) {
		m.control(&trellisv1.SubscribeSessionsResponse{WatchId: id, SessionId: sessionID, Item: ended(err)})
	}
	if sessionID == "" {
		refuse(errs.New(errcode.InvalidParams, "watch %d needs a session_id", id))
		return
	}
	if n, dup := m.has(id); dup {
		refuse(errs.New(errcode.InvalidParams, "watch_id %d is already open on this stream; choose a new one for each watch", id))
		return
	} else if n >= MaxWatchesPerStream {
		refuse(errs.New(errcode.Overloaded, "this stream already has %d watches open, its maximum; unwatch some or open another stream", n).
			WithData("limit", "maxWatchesPerStream").WithData("max", MaxWatchesPerStream))
		return
	}
	if _, err := s.sessions.Get(ctx, sessionID); err != nil {
		refuse(err)
		return
	}
	if err := s.mayWatch(ctx, sessionID); err != nil {
		refuse(err)
		return
	}
	w := &muxWatch{id: id, sessionID: sessionID}
	cur, err := s.events.Watch(ctx, sessionID, req.GetAfterSeq(), func() { m.ready(w) })
	if err != nil {
		refuse(err)
		return
	}
	w.cur = cur
	m.add(w)
}

// mayWatch says whether the caller may read sessionID's events (what
// Subscribe needs of it: the session's owner, a grant, an operator or an
// admin): nil when it may, else the error the watch ends with (not_found
// for a session the caller may not see).
func (s *SessionServer) mayWatch(ctx context.Context, sessionID string) error {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok || s.access == nil {
		return nil
	}
	err := sessionAllowed(ctx, s.access, s.log, p, "/trellis.v1.SessionService/SubscribeSessions", store.RoleViewer, sessionID)
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	code := errcode.Internal
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() != "" {
			code = info.GetReason()
		}
	}
	return errs.New(code, "%s", st.Message())
}

// sendWatch sends at most one message of a ready watch: a page of events,
// then its caught_up marker when the replay is done; it ends the watch on
// an error of its own.
func (s *SessionServer) sendWatch(ctx context.Context, stream grpc.BidiStreamingServer[trellisv1.SubscribeSessionsRequest, trellisv1.SubscribeSessionsResponse], m *mux, w *muxWatch) error {
	p := m.page
	if w.render == nil {
		w.render = codec.NewStoredEvents(w.sessionID)
	}
	p.render = w.render
	n, caughtUp, err := w.cur.Visit(ctx, maxPageEvents, maxPageBytes, p.add)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var sendErr error
	if len(p.seqs) > 0 && m.isOpen(w) {
		sendErr = stream.Send(&trellisv1.SubscribeSessionsResponse{WatchId: w.id, SessionId: w.sessionID,
			Item: &trellisv1.SubscribeSessionsResponse_Events{Events: p.message()}})
	}
	p.reset()
	if sendErr != nil {
		return sendErr
	}
	if err != nil {
		if m.drop(w) && !eventlog.ErrCursorClosed(err) {
			if err := stream.Send(&trellisv1.SubscribeSessionsResponse{WatchId: w.id, SessionId: w.sessionID, Item: ended(err)}); err != nil {
				return err
			}
		}
		return nil
	}
	if caughtUp && m.isOpen(w) {
		if err := stream.Send(&trellisv1.SubscribeSessionsResponse{WatchId: w.id, SessionId: w.sessionID,
			Item: &trellisv1.SubscribeSessionsResponse_CaughtUp{CaughtUp: &trellisv1.CaughtUp{Seq: w.cur.Last()}}}); err != nil {
			return err
		}
	}
	if n > 0 || caughtUp {
		m.ready(w) // it may have more: after the other ready watches
	}
	return nil
}

// ended is the item that ends a watch with err's protocol code.
func ended(err error) *trellisv1.SubscribeSessionsResponse_Ended {
	var e *errs.Error
	msg := "internal error reading the session's events"
	if errors.As(err, &e) {
		msg = e.Msg
	}
	return &trellisv1.SubscribeSessionsResponse_Ended{Ended: &trellisv1.WatchEnded{Code: errs.CodeOf(err), Message: msg}}
}

// mux is the state of one SubscribeSessions stream.
type mux struct {
	mu      sync.Mutex
	watches map[uint64]*muxWatch
	queue   []*muxWatch                            // ready watches, in turn
	ctrl    []*trellisv1.SubscribeSessionsResponse // answers of refused watches
	signal  chan struct{}                          // capacity 1: "something may be ready"
	done    bool                                   // closeAll ran
	page    *eventPage                             // the send loop's, one watch at a time
}

type muxWatch struct {
	id        uint64
	sessionID string
	cur       *eventlog.Cursor
	render    *codec.StoredEvents // its events' rendering (send loop only)
	queued    bool                // on mux.queue (mux.mu)
	closed    bool                // unwatched or ended (mux.mu)
}

func (m *mux) wake() {
	select {
	case m.signal <- struct{}{}:
	default:
	}
}

// ready queues w for the send loop (the cursor's notify: never blocks).
func (m *mux) ready(w *muxWatch) {
	m.mu.Lock()
	if w.queued || w.closed || m.done {
		m.mu.Unlock()
		return
	}
	w.queued = true
	m.queue = append(m.queue, w)
	m.mu.Unlock()
	m.wake()
}

func (m *mux) control(resp *trellisv1.SubscribeSessionsResponse) {
	m.mu.Lock()
	m.ctrl = append(m.ctrl, resp)
	m.mu.Unlock()
	m.wake()
}

// next returns the next answer to send or the next ready watch, or neither.
func (m *mux) next() (*trellisv1.SubscribeSessionsResponse, *muxWatch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.ctrl) > 0 {
		resp := m.ctrl[0]
		m.ctrl[0] = nil
		m.ctrl = m.ctrl[1:]
		return resp, nil
	}
	for len(m.queue) > 0 {
		w := m.queue[0]
		m.queue[0] = nil
		m.queue = m.queue[1:]
		if len(m.queue) == 0 {
			m.queue = nil // let the backing array go
		}
		w.queued = false
		if !w.closed {
			return nil, w
		}
	}
	return nil, nil
}

// has reports how many watches are open and whether id is one of them.
func (m *mux) has(id uint64) (int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.watches[id]
	return len(m.watches), ok
}

func (m *mux) open() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.watches)
}

func (m *mux) isOpen(w *muxWatch) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !w.closed
}

// add registers an opened watch and queues it for its replay.
func (m *mux) add(w *muxWatch) {
	m.mu.Lock()
	if m.done {
		m.mu.Unlock()
		w.cur.Close()
		return
	}
	m.watches[w.id] = w
	m.mu.Unlock()
	m.ready(w)
}

// drop ends w; false if it had ended already.
func (m *mux) drop(w *muxWatch) bool {
	m.mu.Lock()
	was := !w.closed
	w.closed = true
	if m.watches[w.id] == w {
		delete(m.watches, w.id)
	}
	m.mu.Unlock()
	w.cur.Close() // outside m.mu: the cursor's notify takes it
	return was
}

func (m *mux) unwatch(id uint64) {
	m.mu.Lock()
	w := m.watches[id]
	m.mu.Unlock()
	if w != nil {
		m.drop(w)
	}
	m.wake() // the stream may have no watch left
}

// closeAll ends every watch when the stream ends.
func (m *mux) closeAll() {
	m.mu.Lock()
	m.done = true
	ws := make([]*muxWatch, 0, len(m.watches))
	for _, w := range m.watches {
		w.closed = true
		ws = append(ws, w)
	}
	clear(m.watches)
	m.queue = nil
	m.mu.Unlock()
	for _, w := range ws {
		if w.cur != nil {
			w.cur.Close()
		}
	}
}
