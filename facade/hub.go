package facade

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trellis-run/trellis/facade/codec"
	"github.com/trellis-run/trellis/facade/jsonrpc"
	"github.com/trellis-run/trellis/facade/rpcerr"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/telemetry"
)

// hub shares one upstream Subscribe per session among every connection of
// the facade that watches it. Each event is rendered once into its
// session.event frame and offered to each watcher's write queue without
// blocking. A watcher that joins behind the live feed, or whose queue is
// full, reads from the runtime on its own (a private Subscribe from the
// last seq it got) and rejoins the feed once it has caught up: a slow
// client never slows the others and never loses an event.
type hub struct {
	s     *Server
	mu    sync.Mutex // guards feeds and every feed's refs
	feeds map[string]*feed
}

// feed is one session's shared upstream stream.
type feed struct {
	h      *hub
	id     string
	refs   int // connections watching or catching up (hub.mu)
	cancel context.CancelFunc
	ready  chan struct{} // closed once live (or failed: err set)
	err    error

	mu       sync.Mutex // guards last and watchers; held while a frame is offered
	last     int64      // seq of the last event offered
	watchers map[*wsConn]int64
	// watchers maps each live watcher to the seq it already has: frames at
	// or below it are not offered (it read them from its private stream).
}

func newHub(s *Server) *hub { return &hub{s: s, feeds: map[string]*feed{}} }

// acquire returns the session's feed, starting it if needed, with one more
// reference; release gives the reference back.
func (h *hub) acquire(sessionID string) *feed {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.feeds[sessionID]
	if f == nil {
		ctx, cancel := context.WithCancel(h.s.ctx)
		f = &feed{h: h, id: sessionID, cancel: cancel, ready: make(chan struct{}), watchers: map[*wsConn]int64{}}
		h.feeds[sessionID] = f
		go f.run(ctx)
	}
	f.refs++
	return f
}

func (h *hub) release(f *feed) {
	h.mu.Lock()
	f.refs--
	last := f.refs == 0
	if last && h.feeds[f.id] == f {
		delete(h.feeds, f.id)
	}
	h.mu.Unlock()
	if last {
		f.cancel()
	}
}

// drop removes a failed feed so that the next watcher starts a new one.
func (h *hub) drop(f *feed) {
	h.mu.Lock()
	if h.feeds[f.id] == f {
		delete(h.feeds, f.id)
	}
	h.mu.Unlock()
}

// Feeds counts the sessions with a shared upstream stream (for metrics).
func (h *hub) Feeds() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.feeds)
}

// run reads the session's live events (from the end of the log on) and
// offers each rendered frame to the watchers.
func (f *feed) run(ctx context.Context) {
	defer f.cancel()
	stream, err := trellisv1.NewSessionServiceClient(f.h.s.opts.Conn).Subscribe(ctx,
		&trellisv1.SubscribeRequest{SessionId: f.id, AfterSeq: -1, RawPayload: true, RawBatches: true})
	live := false
	for err == nil {
		var resp *trellisv1.SubscribeResponse
		if resp, err = stream.Recv(); err != nil {
			break
		}
		if cu := resp.GetCaughtUp(); cu != nil {
			if !live {
				f.mu.Lock()
				f.last = cu.GetSeq()
				f.mu.Unlock()
				live = true
				close(f.ready)
			}
			continue
		}
		for _, raw := range rawEvents(resp) {
			f.offer(raw.GetSeq(), eventFrame(raw))
		}
	}
	f.h.drop(f)
	if !live {
		f.err = err
		close(f.ready)
		return
	}
	// The runtime ended the stream (it is stopping, or the session went
	// away): the watchers read on their own from where they are, which
	// ends the same way or carries on if the runtime still serves them.
	if ctx.Err() == nil && status.Code(err) != codes.Canceled {
		f.h.s.opts.Log.Debug("session feed ended", "sessionId", f.id, "err", err)
	}
	f.mu.Lock()
	watchers := f.watchers
	f.watchers = nil // ended: nobody joins or rejoins
	f.mu.Unlock()
	for c, have := range watchers {
		c.catchUp(f, have)
	}
}

// rawEvents returns the raw events of one item of a raw Subscribe: a
// batch, one event, or none (caughtUp).
func rawEvents(resp *trellisv1.SubscribeResponse) []*trellisv1.RawEvent {
	if b := resp.GetRawEvents(); b != nil {
		return b.GetEvents()
	}
	if raw := resp.GetRawEvent(); raw != nil {
		return []*trellisv1.RawEvent{raw}
	}
	return nil
}

// eventFrame renders a stored event as its session.event frame.
func eventFrame(raw *trellisv1.RawEvent) []byte {
	params := codec.AppendRawEvent(make([]byte, 0, 112+len(raw.GetPayloadJson())), raw)
	return jsonrpc.NotificationFrame("session.event", params)
}

// sessionEventPrefix and sessionEventSuffix wrap an event's JSON object
// into its session.event frame (jsonrpc.NotificationFrame's bytes).
const (
	sessionEventPrefix = `{"jsonrpc":"2.0","method":"session.event","params":`
	sessionEventSuffix = `}`
)

// checkRendered reports whether a rendered_events item is well formed: as
// many seqs as objects, offsets rising within the JSON.
func checkRendered(re *trellisv1.RenderedEvents) error {
	ends, seqs := re.GetEnds(), re.GetSeqs()
	if len(ends) != len(seqs) || len(ends) == 0 {
		return fmt.Errorf("facade: a rendered_events item has %d objects and %d seqs", len(ends), len(seqs))
	}
	start := 0
	for _, e := range ends {
		if int(e) <= start || int(e) > len(re.GetJson()) {
			return fmt.Errorf("facade: a rendered_events item has an object ending at %d after %d (json of %d bytes)", e, start, len(re.GetJson()))
		}
		start = int(e) + 1
	}
	return nil
}

// appendRenderedFrames appends the session.event frame of each event of a
// checked rendered_events item to frames: all of them in one new buffer,
// each frame a slice of it.
func appendRenderedFrames(frames [][]byte, re *trellisv1.RenderedEvents) [][]byte {
	js, ends := re.GetJson(), re.GetEnds()
	buf := make([]byte, 0, len(js)+len(ends)*(len(sessionEventPrefix)+len(sessionEventSuffix)))
	start := 0
	for _, e := range ends {
		at := len(buf)
		buf = append(buf, sessionEventPrefix...)
		buf = append(buf, js[start:e]...)
		buf = append(buf, sessionEventSuffix...)
		frames = append(frames, buf[at:len(buf):len(buf)])
		start = int(e) + 1
	}
	return frames
}

// offer gives one frame to every live watcher that does not have it yet;
// a watcher whose queue is full leaves the feed and catches up on its own.
func (f *feed) offer(seq int64, frame []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = seq
	for c, have := range f.watchers {
		if seq <= have {
			continue
		}
		if !c.rpc.TrySend(frame) {
			telemetry.SlowClient("fell_behind")
			delete(f.watchers, c)
			c.catchUp(f, seq-1)
			continue
		}
		f.watchers[c] = seq
	}
}

// join makes c a watcher of f from afterSeq (-1: from the feed's live
// position): directly when the feed is there already, else through a
// private catch-up stream. It returns once c receives live events.
func (f *feed) join(ctx context.Context, c *wsConn, afterSeq int64) error {
	select {
	case <-f.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	if f.err != nil {
		return f.err
	}
	f.mu.Lock()
	if f.watchers != nil && (afterSeq < 0 || afterSeq >= f.last) {
		f.watchers[c] = max(afterSeq, f.last)
		f.mu.Unlock()
		return nil
	}
	if afterSeq < 0 {
		afterSeq = f.last
	}
	f.mu.Unlock()
	return c.startCatchUp(ctx, f, afterSeq)
}

// leave removes c from the feed's live watchers.
func (f *feed) leave(c *wsConn) {
	f.mu.Lock()
	if f.watchers != nil {
		delete(f.watchers, c)
	}
	f.mu.Unlock()
}

// catchUp starts c's private stream of f's session from afterSeq; called
// with f.mu held or from the feed's goroutine, so it must not block.
func (c *wsConn) catchUp(f *feed, afterSeq int64) {
	go func() {
		if err := c.startCatchUp(c.rpc.Context(), f, afterSeq); err != nil && c.rpc.Context().Err() == nil {
			c.log.Warn("session events: catching up failed", "sessionId", f.id, "err", err)
			c.unwatch(f.id)
		}
	}()
}

// startCatchUp reads the session from afterSeq on a private stream and
// returns once it is live (its replay is delivered), continuing in the
// background until c can rejoin the shared feed with no gap or duplicate.
func (c *wsConn) startCatchUp(ctx context.Context, f *feed, afterSeq int64) error {
	sctx, cancel := context.WithCancel(c.rpc.Context())
	stream, err := trellisv1.NewSessionServiceClient(c.s.opts.Conn).Subscribe(sctx,
		&trellisv1.SubscribeRequest{SessionId: f.id, AfterSeq: afterSeq, RawPayload: true, RawBatches: true, Rendered: true})
	if err != nil {
		cancel()
		return err
	}
	ready := make(chan error, 1)
	go func() {
		defer cancel()
		have, live := afterSeq, false
		var frames [][]byte
		signal := func(err error) {
			if !live {
				live = true
				ready <- err
			}
		}
		for {
			resp, err := stream.Recv()
			if err != nil {
				signal(err)
				if c.rpc.Context().Err() == nil && status.Code(err) != codes.Canceled {
					c.log.Warn("session event stream ended", "sessionId", f.id, "err", err)
					c.unwatch(f.id)
				}
				return
			}
			if resp.GetCaughtUp() != nil {
				signal(nil)
			}
			if re := resp.GetRenderedEvents(); re != nil {
				if err := checkRendered(re); err != nil {
					signal(err)
					c.log.Error("session event stream: a malformed page", "sessionId", f.id, "err", err)
					c.unwatch(f.id)
					return
				}
				frames = appendRenderedFrames(frames[:0], re)
				// A blocking send, as below.
				if c.rpc.SendFrames(sctx, frames) != nil {
					signal(sctx.Err())
					return
				}
				clear(frames)
				have = re.GetSeqs()[len(re.GetSeqs())-1]
			} else if evs := rawEvents(resp); len(evs) > 0 {
				frames = frames[:0]
				for _, raw := range evs {
					frames = append(frames, eventFrame(raw))
				}
				// A blocking send: this connection's own stream waits for
				// its reader; the runtime serves it from the store meanwhile.
				if c.rpc.SendFrames(sctx, frames) != nil {
					signal(sctx.Err())
					return
				}
				clear(frames)
				have = evs[len(evs)-1].GetSeq()
			}
			if live && f.rejoin(c, have) {
				return
			}
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			return c.s.mapper.FromError(ctx, err)
		}
		return nil
	case <-c.rpc.Done():
		return rpcerr.New(rpcerr.CodeInternal, "the connection closed")
	}
}

// rejoin makes c a live watcher again if the feed is not ahead of what c
// has (have) and the feed still runs.
func (f *feed) rejoin(c *wsConn, have int64) bool {
	select {
	case <-f.ready:
	default:
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil || f.last > have || f.watchers == nil {
		return false
	}
	select {
	case <-c.rpc.Done():
		return true
	default:
	}
	f.watchers[c] = have
	return true
}
