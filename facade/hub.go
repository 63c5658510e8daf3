package facade

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/grpcerr"
	"github.com/trellis-run/trellis/telemetry"
)

// hub shares one upstream stream of each session's events among every
// connection of the facade that watches it. The runtime's events reach the
// facade on ONE multiplexed SubscribeSessions stream (opened on the first
// watch, one reader goroutine dispatching by watch_id), whatever the number
// of sessions watched, as pages of event objects. Each event is framed once
// (codec.AppendEventFrames: one buffer per page) and its frame offered to
// each watcher's write queue without blocking. A watcher that joins behind
// the live feed, or whose queue is full, reads from the runtime on its own
// (a private Subscribe from the last seq it got; transient) and rejoins the
// feed once it has caught up: a slow client never slows the others and never
// loses an event.
type hub struct {
	s     *Server
	mu    sync.Mutex // guards feeds, every feed's refs, and the upstream fields below
	feeds map[string]*feed

	upMu   sync.Mutex // serializes opening the upstream
	up     *upstream  // the multiplexed stream; nil until opened, or after it failed
	nextID uint64     // the last watch_id used
}

// upstream is the hub's multiplexed SubscribeSessions stream.
type upstream struct {
	h      *hub
	stream grpc.BidiStreamingClient[trellisv1.SubscribeSessionsRequest, trellisv1.SubscribeSessionsResponse]
	cancel context.CancelFunc
	sendMu sync.Mutex       // serializes Send
	feeds  map[uint64]*feed // by watch_id (hub.mu)
	dead   bool             // failed: no new watch (hub.mu)
}

// feed is one session's shared upstream stream.
type feed struct {
	h      *hub
	id     string
	refs   int // connections watching or catching up (hub.mu)
	ctx    context.Context
	cancel context.CancelFunc
	ready  chan struct{} // closed once live (or failed: err set)
	err    error

	up      *upstream // the multiplexed stream it is watched on (hub.mu)
	watchID uint64    // its watch on up (hub.mu)
	live    bool      // caught up on up (up's reader only)
	retried bool      // watched again after a stream failed before it was live

	mu       sync.Mutex // guards last, watchers, behind and waits; held while a frame is offered
	last     int64      // seq of the last event offered
	watchers map[*wsConn]int64
	// watchers maps each live watcher to the seq it already has: frames at
	// or below it are not offered (it read them from its private stream).
	// behind maps each watcher catching up on a private stream to the seq
	// it has sent so far.
	behind map[*wsConn]int64
	// waits are the approval requests held back until their connection was
	// given the session's events up to a seq (approval.request follows the
	// events stored before it).
	waits []eventWait
}

// eventWait is one approval request waiting for its connection to be given
// the session's events up to seq; done is closed then.
type eventWait struct {
	c    *wsConn
	seq  int64
	done chan struct{}
}

func newHub(s *Server) *hub { return &hub{s: s, feeds: map[string]*feed{}} }

// acquire returns the session's feed, starting it if needed, with one more
// reference; release gives the reference back.
func (h *hub) acquire(sessionID string) *feed {
	h.mu.Lock()
	f := h.feeds[sessionID]
	if f != nil {
		f.refs++
		h.mu.Unlock()
		return f
	}
	ctx, cancel := context.WithCancel(h.s.ctx)
	f = &feed{h: h, id: sessionID, refs: 1, ctx: ctx, cancel: cancel, ready: make(chan struct{}), watchers: map[*wsConn]int64{}}
	h.feeds[sessionID] = f
	h.mu.Unlock()
	// The watch is sent before acquire returns, so the unwatch of the last
	// release always comes after it.
	h.start(f)
	return f
}

// start watches f on the multiplexed stream (opened if need be), or ends
// it with the reason it cannot be.
func (h *hub) start(f *feed) {
	up, err := h.upstream()
	if err == nil && !up.watch(f) {
		err = errcode.New(errcode.Internal, "the runtime's event stream failed; retry")
	}
	if err != nil {
		f.end(false, err)
	}
}

func (h *hub) release(f *feed) {
	h.mu.Lock()
	f.refs--
	last := f.refs == 0
	if last && h.feeds[f.id] == f {
		delete(h.feeds, f.id)
	}
	up, id := f.up, f.watchID
	unwatch := last && up != nil && up.feeds[id] == f
	if unwatch {
		delete(up.feeds, id)
	}
	h.mu.Unlock()
	if last {
		f.cancel()
	}
	if unwatch {
		up.send(&trellisv1.SubscribeSessionsRequest{Op: &trellisv1.SubscribeSessionsRequest_Unwatch{Unwatch: &trellisv1.UnwatchSession{WatchId: id}}})
	}
}

// drop removes a failed feed so that the next watcher starts a new one.
func (h *hub) drop(f *feed) {
	h.mu.Lock()
	if h.feeds[f.id] == f {
		delete(h.feeds, f.id)
	}
	if f.up != nil && f.up.feeds[f.watchID] == f {
		delete(f.up.feeds, f.watchID)
	}
	h.mu.Unlock()
}

// Feeds counts the sessions with a shared upstream stream (for metrics).
func (h *hub) Feeds() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.feeds)
}

// upstream returns the multiplexed stream, opening it if needed.
func (h *hub) upstream() (*upstream, error) {
	h.upMu.Lock()
	defer h.upMu.Unlock()
	h.mu.Lock()
	up := h.up
	h.mu.Unlock()
	if up != nil {
		return up, nil
	}
	if err := h.s.ctx.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(h.s.ctx)
	stream, err := trellisv1.NewSessionServiceClient(h.s.opts.Conn).SubscribeSessions(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	up = &upstream{h: h, stream: stream, cancel: cancel, feeds: map[uint64]*feed{}}
	h.mu.Lock()
	h.up = up
	h.mu.Unlock()
	go up.read()
	return up, nil
}

// watch adds f to the stream (from the current end of the session); false
// when the stream has failed already.
func (up *upstream) watch(f *feed) bool {
	h := up.h
	h.mu.Lock()
	if up.dead {
		h.mu.Unlock()
		return false
	}
	h.nextID++
	f.up, f.watchID = up, h.nextID
	up.feeds[f.watchID] = f
	h.mu.Unlock()
	// A failed send means a failed stream: its reader sees to f.
	up.send(&trellisv1.SubscribeSessionsRequest{Op: &trellisv1.SubscribeSessionsRequest_Watch{
		Watch: &trellisv1.WatchSession{WatchId: f.watchID, SessionId: f.id, AfterSeq: -1}}})
	return true
}

func (up *upstream) send(req *trellisv1.SubscribeSessionsRequest) {
	up.sendMu.Lock()
	defer up.sendMu.Unlock()
	_ = up.stream.Send(req) // an error ends the stream: read sees why
}

// read dispatches the stream's items to their feeds until it fails.
func (up *upstream) read() {
	h := up.h
	for {
		resp, err := up.stream.Recv()
		if err != nil {
			up.fail(err)
			return
		}
		h.mu.Lock()
		f := up.feeds[resp.GetWatchId()]
		h.mu.Unlock()
		if f == nil {
			continue // unwatched: what was on its way is dropped
		}
		switch item := resp.GetItem().(type) {
		case *trellisv1.SubscribeSessionsResponse_Events:
			if err := f.offerPage(item.Events); err != nil {
				h.s.opts.Log.Error("session events: a malformed page", "sessionId", f.id, "err", err)
				f.end(f.live, err)
			}
		case *trellisv1.SubscribeSessionsResponse_CaughtUp:
			if !f.live {
				f.mu.Lock()
				f.last = item.CaughtUp.GetSeq()
				f.mu.Unlock()
				f.live = true
				close(f.ready)
			}
		case *trellisv1.SubscribeSessionsResponse_Ended:
			f.end(f.live, h.endedError(item.Ended))
		}
	}
}

// endedError maps a watch's end to the protocol error the joiners get.
func (h *hub) endedError(e *trellisv1.WatchEnded) error {
	if e.GetCode() == errcode.Internal || e.GetCode() == "" {
		return h.s.mapper.Internal(h.s.ctx, fmt.Errorf("the runtime ended the watch: %s", e.GetMessage()))
	}
	out := errcode.New(e.GetCode(), "%s", e.GetMessage())
	if e.GetCode() == errcode.Overloaded {
		out.WithData("retryAfterMs", int64(grpcerr.DefaultRetryAfterMs))
	}
	return out
}

// fail ends the stream: its live feeds end (their watchers read on their
// own from where they are); the others are watched once more, on a new
// stream (a second failure ends them: their joiners get the error).
func (up *upstream) fail(err error) {
	h := up.h
	h.mu.Lock()
	up.dead = true
	if h.up == up {
		h.up = nil
	}
	feeds := up.feeds
	up.feeds = map[uint64]*feed{}
	h.mu.Unlock()
	up.cancel()
	if h.s.ctx.Err() == nil {
		h.s.opts.Log.Warn("the runtime's multiplexed event stream ended; watched sessions go on, the stream is opened again", "err", err)
	}
	for _, f := range feeds {
		switch {
		case f.live:
			f.end(true, err)
		case f.retried || f.ctx.Err() != nil:
			f.end(false, err)
		default:
			f.retried = true
			go h.start(f)
		}
	}
}

// end ends the feed: before it was live, its joiners get err; after, the
// runtime ended it (it is stopping, or the session went away) and the
// watchers read on their own from where they are, which ends the same way
// or carries on if the runtime still serves them.
func (f *feed) end(live bool, err error) {
	f.h.drop(f)
	if !live {
		f.err = err
		close(f.ready)
		return
	}
	f.mu.Lock()
	watchers := f.watchers
	f.watchers = nil // ended: nobody joins or rejoins
	f.mu.Unlock()
	for c, have := range watchers {
		c.catchUp(f, have)
	}
}

// offerPage frames a page's events (one buffer for the page) and offers
// them in order.
func (f *feed) offerPage(page *trellisv1.EventPage) error {
	objs, err := codec.PageObjects(page, nil)
	if err != nil {
		return err
	}
	_, frames := codec.AppendEventFrames(nil, nil, objs)
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, seq := range page.GetSeqs() {
		f.offer(seq, frames[i], codec.IsRetracted(objs[i]))
	}
	if len(f.waits) > 0 {
		f.settle()
	}
	return nil
}

// await returns a channel closed once c was given the session's events up
// to seq (nil: it has them already).
func (f *feed) await(c *wsConn, seq int64) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.has(c) >= seq {
		return nil
	}
	w := eventWait{c: c, seq: seq, done: make(chan struct{})}
	f.waits = append(f.waits, w)
	return w.done
}

// unwait drops a wait that ended otherwise (its request was resolved, or
// waited its bound).
func (f *feed) unwait(done <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropWaits(func(w eventWait) bool { return w.done == done }, false)
}

// dropWaits removes the waits that match, closing their channels if end
// (f.mu held).
func (f *feed) dropWaits(match func(eventWait) bool, end bool) {
	kept := f.waits[:0]
	for _, w := range f.waits {
		if !match(w) {
			kept = append(kept, w)
		} else if end {
			close(w.done)
		}
	}
	clear(f.waits[len(kept):])
	f.waits = kept
}

// has is the seq up to which c was given the session's events, live or on
// its private stream (f.mu held; -1: neither yet).
func (f *feed) has(c *wsConn) int64 {
	if have, ok := f.watchers[c]; ok {
		return have
	}
	if have, ok := f.behind[c]; ok {
		return have
	}
	return -1
}

// settle ends the waits whose connection has its seq (f.mu held).
func (f *feed) settle() {
	f.dropWaits(func(w eventWait) bool { return f.has(w.c) >= w.seq }, true)
}

// progressed records what c's private stream has sent (have).
func (f *feed) progressed(c *wsConn, have int64) {
	c.mu.Lock()
	mine := c.subs[f.id] == f
	c.mu.Unlock()
	if !mine {
		return // it left the feed
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.behind == nil {
		f.behind = map[*wsConn]int64{}
	}
	f.behind[c] = have
	if len(f.waits) > 0 {
		f.settle()
	}
}

// lastOf is where a reader stands after a page's events (seqs) given as
// objects: after the last one's seq, or before it for a retracted notice.
func lastOf(objs [][]byte, seqs []int64) int64 {
	i := len(seqs) - 1
	if codec.IsRetracted(objs[i]) {
		return seqs[i] - 1
	}
	return seqs[i]
}

// offer gives one frame to every live watcher that does not have it yet
// (f.mu held); a watcher whose queue is full leaves the feed and catches
// up on its own. A retracted frame (a lease_lost notice, under the seq
// after the last stored event) goes to every live watcher, whatever it
// has, and moves the feed and its watchers back before that seq: the
// events the log holds there (the session's new owner's) follow as any
// others.
func (f *feed) offer(seq int64, frame []byte, retracted bool) {
	f.last = seq
	if retracted {
		f.last = seq - 1
	}
	for c, have := range f.watchers {
		if seq <= have && !retracted {
			continue
		}
		if !c.rpc.TrySend(frame) {
			telemetry.SlowClient("fell_behind")
			delete(f.watchers, c)
			c.catchUp(f, min(have, seq-1))
			continue
		}
		f.watchers[c] = f.last // a live watcher has at least what the feed offered
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
		if len(f.waits) > 0 {
			f.settle()
		}
		f.mu.Unlock()
		return nil
	}
	if afterSeq < 0 {
		afterSeq = f.last
	}
	f.mu.Unlock()
	return c.startCatchUp(ctx, f, afterSeq)
}

// leave removes c from the feed's watchers; its waits end (nothing more of
// the session comes to it).
func (f *feed) leave(c *wsConn) {
	f.mu.Lock()
	f.leaveLocked(c)
	f.mu.Unlock()
}

func (f *feed) leaveLocked(c *wsConn) {
	delete(f.watchers, c) // a nil map (an ended feed): a no-op
	delete(f.behind, c)
	f.dropWaits(func(w eventWait) bool { return w.c == c }, true)
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
	ready := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithCancel(c.rpc.Context())
		defer cancel()
		live := false
		signal := func(err error) {
			if !live {
				live = true
				ready <- err
			}
		}
		err := c.follow(sctx, f.id, afterSeq, func(have int64, caughtUp bool) bool {
			if caughtUp {
				signal(nil)
			}
			f.progressed(c, have)
			return live && f.rejoin(c, have)
		})
		signal(err)
		if err != nil && sctx.Err() == nil && status.Code(err) != codes.Canceled {
			c.log.Warn("session event stream ended", "sessionId", f.id, "err", err)
			c.unwatch(f.id)
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			return c.s.mapper.FromError(ctx, err)
		}
		return nil
	case <-c.rpc.Done():
		return errcode.New(errcode.Internal, "the connection closed")
	}
}

// follow reads the session's events after afterSeq on a Subscribe of c's
// own and queues their frames with blocking sends: this connection's own
// stream waits for its reader, and the runtime serves it from the store
// meanwhile. After each message it calls step with the seq c was given up
// to and whether the replay is done; it returns once step says so, or with
// the error that ended the stream (a malformed page, a closed connection).
func (c *wsConn) follow(ctx context.Context, sessionID string, afterSeq int64, step func(have int64, caughtUp bool) bool) error {
	stream, err := trellisv1.NewSessionServiceClient(c.s.opts.Conn).Subscribe(ctx,
		&trellisv1.SubscribeRequest{SessionId: sessionID, AfterSeq: afterSeq})
	if err != nil {
		return err
	}
	have, caughtUp := afterSeq, false
	var objs, frames [][]byte
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if page := resp.GetEvents(); page != nil {
			if objs, err = codec.PageObjects(page, objs[:0]); err != nil {
				return err
			}
			_, frames = codec.AppendEventFrames(nil, frames[:0], objs)
			if err := c.rpc.SendFrames(ctx, frames); err != nil {
				return err
			}
			clear(frames)
			have = lastOf(objs, page.GetSeqs())
		}
		caughtUp = caughtUp || resp.GetCaughtUp() != nil
		if step(have, caughtUp) {
			return nil
		}
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
	delete(f.behind, c)
	if len(f.waits) > 0 {
		f.settle()
	}
	return true
}
