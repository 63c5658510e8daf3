package eventlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/telemetry"
)

// ErrClosed is wrapped by the errors of Append and Subscribe once the log is
// closed, and returned by Subscription.Err when Close ended a subscription.
var ErrClosed = errors.New("event log closed")

// errShutdown is ErrClosed as a client is told it: the daemon is stopping,
// so the call may be retried (on this daemon once it is back, or on
// another of its cluster).
func errShutdown() *errs.Error {
	return errs.Wrap(errcode.Overloaded, ErrClosed, "event log: closed, the daemon is shutting down").WithData("retryAfterMs", 1000)
}

// ErrHeld is wrapped by the error (code store_unavailable) of an Append
// whose event the store could not take: its disk is full, it is read-only
// or unreachable. The event keeps its seq, is offered to the subscribers
// from memory with Unstored set, and is stored, before any later event of
// its session, as soon as the store takes writes again (the log retries
// every HeldRetry). Later events of the session wait behind it, so the
// stored log never has a gap.
var ErrHeld = errors.New("the event is held in memory until the store can write")

// HeldRetry is how often the log retries storing held events while nothing
// else of their sessions is being appended.
const HeldRetry = 250 * time.Millisecond

// Option tunes a Log.
type Option func(*config)

type config struct {
	subscriberBuffer int
	replayPage       int
	maxBatch         int
	maxQueued        int
	linger           time.Duration
	streaming        map[string]bool
	mergeMax         int
	payloadForm      func(kind string, payload json.RawMessage) (json.RawMessage, error)
	fence            FenceFunc
	now              func() time.Time
	heldStored       func(sessionID string)
	idleSessions     int
	commitTimeout    time.Duration
}

// DefaultCommitTimeout is how long one commit may take before its batch
// fails (see WithCommitTimeout). It is longer than SQLite's own 10 s wait
// for a lock, which so answers first; on PostgreSQL the daemon derives the
// deadline from its lease.
const DefaultCommitTimeout = 15 * time.Second

// WithCommitTimeout sets the deadline of each commit (default
// DefaultCommitTimeout). A commit past it, or one the store ends for a
// lock or statement timeout (store.ErrTimeout), fails its events with
// store_busy: they are not recorded and their seqs are reused, and the
// writer goes on with the other sessions' events. They are not held for a
// retry like the events of a store that cannot write, since each retry
// would stop the one writer again for as long.
func WithCommitTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.commitTimeout = d
		}
	}
}

// DefaultIdleSessions is how many idle sessions the log keeps besides those
// with live work before it evicts them (see WithIdleSessions).
const DefaultIdleSessions = 1024

// WithIdleSessions sets how many idle sessions (no cursor, nothing queued
// or held) the log keeps at least before it evicts them (default
// DefaultIdleSessions). Whenever a new session makes the log's table reach
// its sweep mark, every idle session is dropped, and the mark is set to the
// sessions left plus the larger of n and their number: the table is bounded
// by live work, and a sweep costs O(1) per new session. An evicted
// session's next event reads its last seq from the store again.
func WithIdleSessions(n int) Option {
	return func(c *config) {
		if n >= 0 {
			c.idleSessions = n
		}
	}
}

// WithHeldStored sets a function called (on its own goroutine) each time a
// session's held events have been stored: what was recorded elsewhere
// while the store could not write may need writing again.
func WithHeldStored(f func(sessionID string)) Option {
	return func(c *config) { c.heldStored = f }
}

// WithPayloadForm sets the function that turns each payload's JSON into
// the form that is stored (the daemon's: the protocol's rendering of the
// kind's payload message, so that readers serve the stored bytes as they
// are). An error refuses the event.
func WithPayloadForm(f func(kind string, payload json.RawMessage) (json.RawMessage, error)) Option {
	return func(c *config) { c.payloadForm = f }
}

// DefaultLinger is how long the writer waits for more streaming events
// before it commits a batch that holds nothing else (see WithLinger).
const DefaultLinger = 2 * time.Millisecond

// StreamingKinds are the small, frequent events of a streaming turn that
// may wait up to the linger for a shared commit.
var StreamingKinds = []string{eventkind.MessageDelta, eventkind.MessageReasoning, eventkind.ToolProgress}

// WithLinger sets how long the writer waits for more events before it
// commits a batch made only of streaming kinds (default DefaultLinger and
// StreamingKinds; 0 commits at once). Only a batch whose first chunk came
// less than d after the streaming chunk before it (of any session) waits:
// more are then likely to share the commit, where a lonely chunk (one
// session streaming at a model's pace) would wait for nobody and commits
// at once. Any other event commits the queue at once, so only streaming
// chunks can wait, and a crash loses at most the last linger's chunks,
// never an event whose Append returned.
func WithLinger(d time.Duration, kinds ...string) Option {
	return func(c *config) {
		if d >= 0 {
			c.linger = d
		}
		if len(kinds) > 0 {
			c.streaming = map[string]bool{}
			for _, k := range kinds {
				c.streaming[k] = true
			}
		}
	}
}

// DefaultMergeMax is the most text, in bytes, that consecutive chunks of one
// session are merged into (see WithTextMerge).
const DefaultMergeMax = 16 << 10

// WithTextMerge sets the most text, in bytes, that EnqueueText merges
// consecutive chunks of a session into while the first of them still waits
// for the writer (default DefaultMergeMax; 0 turns merging off: every chunk
// is its own event).
func WithTextMerge(maxBytes int) Option {
	return func(c *config) {
		if maxBytes >= 0 {
			c.mergeMax = maxBytes
		}
	}
}

// positive is an Option setting the field of config that field points
// to, when n is positive (else it keeps its default).
func positive(n int, field func(*config) *int) Option {
	return func(c *config) {
		if n > 0 {
			*field(c) = n
		}
	}
}

// WithSubscriberBuffer sets how many live events a subscription buffers
// before it falls back to reading the store (default 1024).
func WithSubscriberBuffer(n int) Option {
	return positive(n, func(c *config) *int { return &c.subscriberBuffer })
}

// WithReplayPage sets how many events one store read returns during replay
// and catch-up at most (default 4096; reads start at 512 and double).
func WithReplayPage(n int) Option {
	return positive(n, func(c *config) *int { return &c.replayPage })
}

// WithClock sets the source of event timestamps (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}

// Log is the event log of every session of a daemon. It is safe for
// concurrent use; it must be the only writer of events to its store.
type Log struct {
	st  store.EventStore
	cfg config

	mu         sync.Mutex // guards sessions, sweepAt and subsClosed
	sessions   map[string]*session
	sweepAt    int // evict idle sessions when a new one makes sessions this large
	subsClosed bool

	qmu    sync.Mutex // guards queue, urgent, closed and lastChunk
	queue  []*pending
	urgent int // queued events that are not streaming chunks
	closed bool
	// lastChunk is when the latest streaming chunk arrived, of any
	// session: a chunk waits for company only if one came within the
	// linger before it.
	lastChunk time.Time
	wake      chan struct{} // capacity 1: "the queue may be non-empty"

	// slots bounds the events queued and not yet committed.
	slots chan struct{}

	writerDone chan struct{}
	closeOnce  sync.Once

	// held lists the sessions with held events (writer goroutine only);
	// heldSessions is its size, for Held's lock-free common case.
	held         map[*session]struct{}
	heldSessions atomic.Int32
}

// session is the log's state for one session.
type session struct {
	id string

	mu      sync.Mutex // the append lock: seq assignment and enqueueing
	loaded  bool       // next is valid
	next    int64      // next seq to assign
	evicted bool       // dropped from Log.sessions (mu and Log.mu): look the id up again

	// inflight counts the session's events queued and not yet finished:
	// raised under mu, lowered by the writer.
	inflight atomic.Int32

	// epoch rises (under mu) each time a commit of this session fails;
	// queued events of an older epoch are failed instead of written, since
	// writing them would leave a gap.
	epoch   atomic.Uint64
	failErr error // the last commit failure; writer goroutine only

	known     atomic.Bool  // committed is valid
	committed atomic.Int64 // last durable seq

	// heldEvs are the events after committed that the store refused
	// (ErrHeld), in seq order, Unstored set: they are written before any
	// later event of the session. Changed by the writer goroutine only,
	// under heldMu (subscriptions read them).
	heldMu  sync.Mutex
	heldEvs []store.Event

	// tail is the session's latest queued event (set under mu): EnqueueText
	// merges a chunk into it while the writer has not taken it. The writer
	// clears it once the event is finished, so that no payload outlives its
	// commit.
	tail atomic.Pointer[pending]

	subMu sync.Mutex
	subs  map[*Cursor]struct{} // the open cursors (each subscription's too)
}

// pending is one Append waiting for its commit.
type pending struct {
	ev        store.Event
	s         *session
	epoch     uint64
	streaming bool      // a streaming chunk
	at        time.Time // when it was queued (streaming events only)
	// lingers: a streaming chunk that came less than the linger after the
	// one before it (Log.qmu), so that more are likely to share its
	// commit; a lonely chunk commits at once.
	lingers bool
	err     error
	done    chan struct{} // closed by the writer once err is final

	// A text chunk (EnqueueText): its text, and how many chunks were
	// merged into it after the first (then ev.Payload is rendered again
	// when the writer takes it).
	isText bool
	text   []byte
	merged int
	taken  bool // the writer took it into a batch (Log.qmu)
}

// wait blocks until the event is durable or has failed.
func (p *pending) wait() (store.Event, error) {
	<-p.done
	if p.err != nil {
		if errors.Is(p.err, ErrHeld) {
			return p.ev, p.err // its seq, Unstored: stored later
		}
		return store.Event{}, p.err
	}
	return p.ev, nil
}

// New returns a Log writing to st and starts its writer goroutine; Close
// stops it. The log does not close st.
func New(st store.EventStore, opts ...Option) *Log {
	cfg := config{subscriberBuffer: 1024, replayPage: 4096, maxBatch: 4096, maxQueued: 65536, linger: DefaultLinger,
		mergeMax: DefaultMergeMax, now: time.Now, idleSessions: DefaultIdleSessions, commitTimeout: DefaultCommitTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.streaming == nil {
		cfg.streaming = map[string]bool{}
		for _, k := range StreamingKinds {
			cfg.streaming[k] = true
		}
	}
	l := &Log{
		st:         st,
		cfg:        cfg,
		sessions:   make(map[string]*session),
		wake:       make(chan struct{}, 1),
		slots:      make(chan struct{}, cfg.maxQueued),
		writerDone: make(chan struct{}),
		held:       map[*session]struct{}{},
		sweepAt:    cfg.idleSessions,
	}
	go l.writer()
	return l
}

func (l *Log) session(id string) *session {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sessionLocked(id)
}

// lockSession returns the session's state with its append lock held.
func (l *Log) lockSession(id string) *session {
	for {
		s := l.session(id)
		s.mu.Lock()
		if !s.evicted {
			return s
		}
		s.mu.Unlock()
	}
}

// sessionLocked returns the session's state, made if needed (l.mu held).
// Making one may sweep the idle sessions out first.
func (l *Log) sessionLocked(id string) *session {
	s := l.sessions[id]
	if s == nil {
		if len(l.sessions) >= l.sweepAt {
			l.sweep()
		}
		s = &session{id: id, subs: make(map[*Cursor]struct{})}
		l.sessions[id] = s
	}
	return s
}

// sweep drops every idle session from l.sessions (l.mu held): no cursor,
// nothing queued, nothing held. Its next event reloads the last seq from
// the store, where every event of an idle session is. A session whose
// append lock is taken is busy and stays.
func (l *Log) sweep() {
	for id, s := range l.sessions {
		if !s.mu.TryLock() {
			continue
		}
		if s.idle() {
			s.evicted = true
			delete(l.sessions, id)
		}
		s.mu.Unlock()
	}
	l.sweepAt = len(l.sessions) + max(l.cfg.idleSessions, len(l.sessions))
}

// idle reports whether the session has no live work (s.mu held).
func (s *session) idle() bool {
	if s.inflight.Load() != 0 {
		return false
	}
	s.subMu.Lock()
	subs := len(s.subs)
	s.subMu.Unlock()
	s.heldMu.Lock()
	held := len(s.heldEvs)
	s.heldMu.Unlock()
	return subs == 0 && held == 0
}

// Sessions returns how many sessions the log keeps state for: those with
// live work and at most the idle ones WithIdleSessions allows.
func (l *Log) Sessions() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sessions)
}

// Append stores one event of the session and returns it with its seq and
// timestamp once it is durable and has been offered to every subscriber.
// payload is marshalled to JSON (a json.RawMessage is used as it is). Once
// the event is queued, Append waits for the outcome even if ctx ends, so
// that a returned error always means "not recorded", except ErrHeld: the
// store could not write, and the event (returned with its seq and Unstored
// set) is stored later under that seq. On any other failure no seq is
// consumed: the next Append reuses it.
func (l *Log) Append(ctx context.Context, sessionID, kind string, payload any) (store.Event, error) {
	wait, err := l.Enqueue(ctx, sessionID, kind, payload)
	if err != nil {
		return store.Event{}, err
	}
	return wait()
}

// Enqueue queues one event like Append but returns as soon as the event has
// its place in the session's order; wait blocks until it is durable (or has
// failed). A producer of many small events (a streaming answer) enqueues
// them without waiting, so that they share commits, and waits on the last
// one: commits are in seq order, so when an event is durable every earlier
// event of its session is too, and a failure fails every later queued event
// of that session as well. Enqueue blocks while the log holds its maximum
// of uncommitted events (backpressure instead of unbounded memory).
func (l *Log) Enqueue(ctx context.Context, sessionID, kind string, payload any) (wait func() (store.Event, error), err error) {
	return l.enqueueEvent(ctx, sessionID, kind, payload, nil)
}

// textPayload is the payload of a text chunk (EnqueueText).
type textPayload struct {
	Text string `json:"text"`
}

// EnqueueText queues a streaming text chunk, an event of kind whose payload
// is {"text": text} (message.delta, message.reasoning), like Enqueue, with
// one difference: while the session's latest queued event is a chunk of the
// same kind that the writer has not taken yet (it waits for the linger or
// for the commit before it), text is appended to that event instead of
// becoming an event of its own, up to the WithTextMerge limit. So a session
// streaming faster than the log commits stores and delivers fewer, longer
// chunks: the concatenated text, the order of every event and the seqs (no
// gap) stay the same, and a chunk is as durable as the event it joined
// (it never waits longer than the linger). wait reports that event.
func (l *Log) EnqueueText(ctx context.Context, sessionID, kind, text string) (wait func() (store.Event, error), err error) {
	if l.cfg.mergeMax > 0 && sessionID != "" {
		s := l.lockSession(sessionID)
		if p := s.tail.Load(); p != nil && p.isText && p.ev.Kind == kind && p.epoch == s.epoch.Load() {
			l.qmu.Lock()
			ok := !p.taken && !l.closed && len(p.text)+len(text) <= l.cfg.mergeMax
			if ok {
				p.text = append(p.text, text...)
				p.merged++
				l.lastChunk = time.Now()
			}
			l.qmu.Unlock()
			if ok {
				s.mu.Unlock()
				return p.wait, nil
			}
		}
		s.mu.Unlock()
	}
	return l.enqueueEvent(ctx, sessionID, kind, textPayload{Text: text}, &text)
}

// enqueueEvent is Enqueue; text is set for a text chunk that later chunks
// may be merged into.
func (l *Log) enqueueEvent(ctx context.Context, sessionID, kind string, payload any, text *string) (wait func() (store.Event, error), err error) {
	if sessionID == "" || kind == "" {
		return nil, errs.New(errcode.InvalidParams, "event log: an event needs a session id and a kind (got %q, %q)", sessionID, kind)
	}
	data, err := l.encode(kind, payload)
	if err != nil {
		return nil, errs.Wrap(errcode.Internal, err, "event log: the %s event of session %s was not recorded", kind, sessionID)
	}
	// Take a queue slot before the session lock: the writer needs that lock
	// to fail a session, and it frees slots only after that.
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, errs.Wrap(errcode.Internal, ctx.Err(), "event log: gave up waiting for room in the queue; the %s event of session %s was not recorded", kind, sessionID)
	}
	s := l.lockSession(sessionID)
	if !l.owned(s) {
		// The store would refuse it, and one cut off from this daemon would
		// not even answer the read of the last seq below.
		s.mu.Unlock()
		<-l.slots
		return nil, errs.Wrap(errcode.Overloaded, errNotOwned(sessionID),
			"event log: this daemon no longer holds the lease of session %s (another daemon owns it, or will); the %s event was not recorded", sessionID, kind).WithData("retryAfterMs", 1000)
	}
	if !s.loaded {
		last, err := l.st.LastSeq(ctx, sessionID)
		if err != nil {
			s.mu.Unlock()
			<-l.slots
			return nil, errs.Wrap(errcode.Internal, err, "event log: cannot read the last event of session %s", sessionID)
		}
		s.next, s.loaded = last+1, true
		s.committed.Store(last)
		s.known.Store(true)
		s.heldMu.Lock()
		if n := len(s.heldEvs); n > 0 && s.heldEvs[n-1].Seq >= s.next {
			// Held events keep their seqs: the next event follows them.
			s.next = s.heldEvs[n-1].Seq + 1
		}
		s.heldMu.Unlock()
	}
	p := &pending{
		ev:    store.Event{SessionID: sessionID, Seq: s.next, Kind: kind, Payload: data, TS: l.cfg.now().UTC().Truncate(time.Microsecond)},
		s:     s,
		epoch: s.epoch.Load(),
		done:  make(chan struct{}),
	}
	if l.cfg.linger > 0 && l.cfg.streaming[kind] {
		p.streaming, p.at = true, time.Now()
	}
	if text != nil && l.cfg.mergeMax > 0 {
		p.isText = true
		p.text = append(make([]byte, 0, max(len(*text), 64)), *text...)
	}
	// Enqueue under the session lock so that the queue holds each session's
	// events in seq order.
	s.inflight.Add(1)
	if !l.enqueue(p) {
		s.inflight.Add(-1)
		s.mu.Unlock()
		<-l.slots
		return nil, errs.Wrap(errcode.Overloaded, ErrClosed, "event log: closed, the daemon is shutting down; the %s event of session %s was not recorded", kind, sessionID).WithData("retryAfterMs", 1000)
	}
	s.next++
	s.tail.Store(p)
	s.mu.Unlock()
	return p.wait, nil
}

// finish reports a pending event's outcome and frees its queue slot. The
// session no longer points at it: its payload lives on only where a reader
// or the caller keeps it.
func (l *Log) finish(p *pending) {
	p.s.tail.CompareAndSwap(p, nil)
	p.s.inflight.Add(-1)
	close(p.done)
	<-l.slots
}

// textForm renders the payload of a merged text chunk. Its first chunk's
// payload passed the payload form already and only the text differs, so
// the form cannot refuse it; if it did anyway, the plain JSON (the same
// value) is stored.
func (l *Log) textForm(kind string, text []byte) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(textPayload{Text: string(text)}) // a struct of one string cannot fail
	data := json.RawMessage(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	if l.cfg.payloadForm != nil {
		if form, err := l.cfg.payloadForm(kind, data); err == nil {
			return form
		}
	}
	return data
}

// encode is a payload's stored form: its JSON in the payload form.
func (l *Log) encode(kind string, payload any) (json.RawMessage, error) {
	data, err := marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("the payload cannot be encoded as JSON: %w", err)
	}
	if l.cfg.payloadForm != nil {
		return l.cfg.payloadForm(kind, data)
	}
	return data, nil
}

func marshal(payload any) (json.RawMessage, error) {
	if raw, ok := payload.(json.RawMessage); ok {
		if raw == nil {
			return json.RawMessage("null"), nil
		}
		if !json.Valid(raw) {
			return nil, errors.New("invalid json.RawMessage")
		}
		return append(json.RawMessage(nil), raw...), nil
	}
	return json.Marshal(payload)
}

func (l *Log) enqueue(p *pending) bool {
	l.qmu.Lock()
	if l.closed {
		l.qmu.Unlock()
		return false
	}
	l.queue = append(l.queue, p)
	if p.streaming {
		p.lingers = !l.lastChunk.IsZero() && p.at.Sub(l.lastChunk) < l.cfg.linger
		l.lastChunk = p.at
	} else {
		l.urgent++
	}
	// A lingering writer needs waking only when the batch must go now; a
	// streaming chunk behind another one just joins the next commit.
	signal := len(l.queue) == 1 || !p.lingers || len(l.queue) >= l.cfg.maxBatch
	l.qmu.Unlock()
	if signal {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// lingerFor says how long the writer should still wait before committing
// the queue (qmu held): > 0 only while every queued event is a streaming
// chunk, the oldest came within the linger after the chunk before it (a
// lonely chunk, a model's paced stream alone on the daemon, would wait for
// nobody), the batch is not full and the oldest waited less than the
// linger.
func (l *Log) lingerFor() time.Duration {
	if l.cfg.linger <= 0 || l.closed || l.urgent > 0 || len(l.queue) == 0 || len(l.queue) >= l.cfg.maxBatch || !l.queue[0].lingers {
		return 0
	}
	return l.cfg.linger - time.Since(l.queue[0].at)
}

// writer commits the queue in batches until the log is closed and drained.
func (l *Log) writer() {
	defer close(l.writerDone)
	var spare []*pending
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		l.qmu.Lock()
		for len(l.queue) == 0 && !l.closed {
			l.qmu.Unlock()
			if len(l.held) > 0 {
				// Held events are retried until the store takes them.
				timer.Reset(HeldRetry)
				select {
				case <-l.wake:
					timer.Stop()
				case <-timer.C:
					l.retryHeld()
				}
			} else {
				<-l.wake
			}
			l.qmu.Lock()
		}
		if len(l.queue) == 0 {
			l.qmu.Unlock()
			l.retryHeld() // a last try before the daemon stops
			return
		}
		if d := l.lingerFor(); d > 0 {
			l.qmu.Unlock()
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-l.wake:
				timer.Stop() // Go ≥ 1.23: no stale tick survives Stop
			}
			continue
		}
		var batch []*pending
		if len(l.queue) <= l.cfg.maxBatch {
			batch, l.queue = l.queue, spare[:0]
		} else {
			batch = append(spare[:0], l.queue[:l.cfg.maxBatch]...)
			l.queue = append(l.queue[:0], l.queue[l.cfg.maxBatch:]...)
		}
		for _, p := range batch {
			if !p.streaming {
				l.urgent--
			}
			p.taken = true
		}
		l.qmu.Unlock()
		for _, p := range batch {
			if p.merged > 0 {
				p.ev.Payload = l.textForm(p.ev.Kind, p.text)
			}
			p.text = nil // taken: no chunk joins it any more
		}

		l.commit(batch)
		clear(batch)
		spare = batch
	}
}

// commit writes one batch in one transaction. If that fails and the batch
// spans sessions, each session's part is retried on its own so that one
// session's failure (a deleted row, say) does not fail the others.
func (l *Log) commit(batch []*pending) {
	live := make([]*pending, 0, len(batch))
	evs := make([]store.Event, 0, len(batch))
	for _, p := range batch {
		if p.epoch != p.s.epoch.Load() {
			p.err = errs.Wrap(errs.CodeOf(p.s.failErr), p.s.failErr,
				"event log: an earlier event of session %s could not be stored, so this %s event was not recorded either", p.s.id, p.ev.Kind)
			l.finish(p)
			continue
		}
		live = append(live, p)
		evs = append(evs, p.ev)
	}
	if l.cfg.fence != nil {
		live, evs = l.unowned(live, evs)
	}
	if len(live) == 0 {
		return
	}
	if len(l.held) > 0 {
		// A session with held events writes them first, on its own.
		for _, g := range bySession(live) {
			l.commitGroup(g)
		}
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.commitTimeout)
	err := l.st.AppendEvents(ctx, l.storeWriter(live), evs)
	cancel()
	if err == nil {
		telemetry.EventsCommitted(len(evs), time.Since(start))
		l.committed(live)
		return
	}
	telemetry.StoreError("append_events")
	groups := bySession(live)
	if len(groups) == 1 {
		l.fail(groups[0], err)
		return
	}
	for _, g := range groups {
		l.commitGroup(g)
	}
}

// owned reports whether this daemon may write the session's events: always
// alone on its store; with a fence, while it holds the session's lease
// (and judges it still valid, see cluster.Node.Fence).
func (l *Log) owned(s *session) bool {
	if l.cfg.fence == nil {
		return true
	}
	_, ok := l.cfg.fence(s.id)
	return ok
}

// errNotOwned is the cause of failing the events of a session this daemon
// holds no lease on, without asking the store: it would refuse them.
func errNotOwned(id string) error {
	return fmt.Errorf("session %s: %w", id, store.ErrLeaseLost)
}

// unowned fails at once the events of sessions this daemon holds no lease
// on (the store would refuse them, and one this daemon cannot reach must
// not hold them as if it could store them later) and returns the others.
func (l *Log) unowned(live []*pending, evs []store.Event) ([]*pending, []store.Event) {
	var refused map[*session][]*pending
	ok := map[*session]bool{}
	for _, p := range live {
		own, seen := ok[p.s]
		if !seen {
			own = l.owned(p.s)
			ok[p.s] = own
		}
		if !own {
			if refused == nil {
				refused = map[*session][]*pending{}
			}
			refused[p.s] = append(refused[p.s], p)
		}
	}
	if refused == nil {
		return live, evs
	}
	keep, keepEvs := live[:0], evs[:0]
	for i, p := range live {
		if ok[p.s] {
			keep, keepEvs = append(keep, p), append(keepEvs, evs[i])
		}
	}
	for s, g := range refused {
		l.fail(g, errNotOwned(s.id))
	}
	return keep, keepEvs
}

// commitGroup writes one session's part of a batch, after its held events
// if it has any, in one transaction.
func (l *Log) commitGroup(g []*pending) {
	s := g[0].s
	held := len(s.heldEvs)
	evs := make([]store.Event, 0, held+len(g))
	for _, ev := range s.heldEvs {
		ev.Unstored = false
		evs = append(evs, ev)
	}
	for _, p := range g {
		evs = append(evs, p.ev)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.commitTimeout)
	err := l.st.AppendEvents(ctx, l.storeWriter(g), evs)
	cancel()
	if err != nil {
		telemetry.StoreError("append_events")
		l.fail(g, err)
		return
	}
	telemetry.EventsCommitted(len(evs), time.Since(start))
	if held > 0 {
		l.heldStored(s, evs[:held])
	}
	l.committed(g)
}

// retryHeld tries to store the held events of every session that has some.
func (l *Log) retryHeld() {
	for s := range l.held {
		if !l.owned(s) {
			// Another daemon may own it now: its held events can never be
			// stored by this one.
			l.dropHeld(s, errNotOwned(s.id))
			continue
		}
		evs := make([]store.Event, len(s.heldEvs))
		for i, ev := range s.heldEvs {
			ev.Unstored = false
			evs[i] = ev
		}
		w := store.Unfenced()
		if l.cfg.fence != nil {
			w = store.Under(l.fenceOf(s.id))
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.commitTimeout)
		err := l.st.AppendEvents(ctx, w, evs)
		cancel()
		switch {
		case err == nil:
			l.heldStored(s, evs)
		case timedOut(err):
			// Tried again at the next retry.
			telemetry.StoreError("append_events")
		case !holdable(err):
			// The session is gone or another daemon owns it now: its held
			// events can never be stored by this daemon.
			l.dropHeld(s, err)
		default:
			telemetry.StoreError("append_events")
		}
	}
}

// heldStored records that a session's held events are now durable and
// offers their stored form to the subscribers (who skip the seqs they got
// from memory already).
func (l *Log) heldStored(s *session, evs []store.Event) {
	s.heldMu.Lock()
	s.heldEvs = nil
	s.heldMu.Unlock()
	delete(l.held, s)
	l.heldSessions.Store(int32(len(l.held)))
	for i := range evs {
		s.committed.Store(evs[i].Seq)
		s.fanOut(&evs[i])
	}
	if f := l.cfg.heldStored; f != nil {
		go f(s.id)
	}
}

// dropHeld forgets held events that cannot be stored any more and makes
// the session reload its numbering from the store.
func (l *Log) dropHeld(s *session, cause error) {
	s.heldMu.Lock()
	s.heldEvs = nil
	s.heldMu.Unlock()
	delete(l.held, s)
	l.heldSessions.Store(int32(len(l.held)))
	s.mu.Lock()
	s.failErr = errs.Wrap(errs.CodeOf(cause), cause, "event log: the held events of session %s cannot be stored", s.id)
	s.epoch.Add(1)
	s.loaded = false
	s.known.Store(false)
	s.mu.Unlock()
}

// holdable reports whether a failed commit's events are kept for a later
// try: the store could not write (disk full, read-only, unreachable, busy),
// as opposed to refusing these events (a deleted session, a lost lease, a
// duplicate or invalid event) or not committing them in time (timedOut).
func holdable(err error) bool {
	return !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrLeaseLost) &&
		!errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrInvalid) && !timedOut(err)
}

// timedOut reports whether a commit failed for its deadline or a lock or
// statement timeout of the store.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrTimeout)
}

func bySession(ps []*pending) [][]*pending {
	index := map[*session]int{}
	var groups [][]*pending
	for _, p := range ps {
		i, ok := index[p.s]
		if !ok {
			i = len(groups)
			index[p.s] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], p)
	}
	return groups
}

// committed publishes durable events: counter, subscribers, then the
// waiting Append calls.
func (l *Log) committed(ps []*pending) {
	for _, p := range ps {
		p.s.committed.Store(p.ev.Seq)
		p.s.fanOut(&p.ev)
		l.finish(p)
	}
}

// fail reports a failed commit of one session's events and makes the
// session reload its counter from the store, so that their seqs are reused.
func (l *Log) fail(ps []*pending, cause error) {
	s := ps[0].s
	if holdable(cause) && !l.owned(s) {
		// The lease ran out while the store could not write: this daemon
		// can never store them, so they are not held (nor sent).
		cause = fmt.Errorf("%w (the store failed too: %w)", errNotOwned(s.id), cause)
	}
	if holdable(cause) {
		l.hold(ps, cause)
		return
	}
	if len(s.heldEvs) > 0 && !timedOut(cause) {
		// Refused for good (a deleted session, a lost lease, a conflict):
		// the held events cannot be stored either. A timeout (a lock held
		// elsewhere) fails only the commit's own events; the held ones are
		// tried again (retryHeld), as a retry that times out leaves them.
		l.dropHeld(s, cause)
	}
	code := errcode.Internal
	if errors.Is(cause, store.ErrNotFound) {
		code = errcode.NotFound
	}
	err := errs.Wrap(code, cause, "event log: could not store %d event(s) of session %s; they were not recorded", len(ps), s.id)
	if code == errcode.NotFound {
		err = errs.Wrap(code, cause, "event log: session %s does not exist; %d event(s) were not recorded", s.id, len(ps))
	}
	if timedOut(cause) {
		err = errs.Wrap(errcode.StoreBusy, cause, "event log: the store did not commit %d event(s) of session %s within %s (a lock held elsewhere, or a statement past its timeout); "+
			"they were not recorded: retry in a moment", len(ps), s.id, l.cfg.commitTimeout).WithData("retryAfterMs", 1000)
	}
	if errors.Is(cause, store.ErrLeaseLost) {
		err = errs.Wrap(errcode.Overloaded, cause, "event log: another daemon took session %s over; %d event(s) of this daemon were not recorded", s.id, len(ps)).WithData("retryAfterMs", 1000)
	}
	s.mu.Lock()
	s.failErr = err
	s.epoch.Add(1)
	s.loaded = false
	s.known.Store(false) // a commit that timed out may have been stored after all
	s.mu.Unlock()
	for _, p := range ps {
		p.err = err
		l.finish(p)
	}
}

// hold keeps the events of a commit the store could not write: they keep
// their seqs, are offered to the subscribers from memory (Unstored), and
// their Append calls fail with ErrHeld (code store_unavailable).
func (l *Log) hold(ps []*pending, cause error) {
	s := ps[0].s
	err := errs.Wrap(errcode.StoreUnavailable, fmt.Errorf("%w: %w", ErrHeld, cause),
		"the store cannot write (its disk is full, it is read-only or unreachable): %d event(s) of session %s were sent from memory "+
			"and are stored once it works again; free disk space or restore access to the store", len(ps), s.id)
	s.heldMu.Lock()
	for _, p := range ps {
		p.ev.Unstored = true
		s.heldEvs = append(s.heldEvs, p.ev)
	}
	s.heldMu.Unlock()
	l.held[s] = struct{}{}
	l.heldSessions.Store(int32(len(l.held)))
	for _, p := range ps {
		s.fanOut(&p.ev)
		p.err = err
		l.finish(p)
	}
}

// Held returns how many events of the session are held in memory because
// the store could not take them (0 when the store is writing normally).
func (l *Log) Held(sessionID string) int {
	if l.heldSessions.Load() == 0 {
		return 0
	}
	l.mu.Lock()
	s := l.sessions[sessionID]
	l.mu.Unlock()
	if s == nil {
		return 0
	}
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	return len(s.heldEvs)
}

// LastSeq returns the seq of the session's latest durable event, 0 if none.
func (l *Log) LastSeq(ctx context.Context, sessionID string) (int64, error) {
	l.mu.Lock()
	s := l.sessions[sessionID]
	l.mu.Unlock()
	if s != nil {
		return l.lastStored(ctx, s)
	}
	seq, err := l.st.LastSeq(ctx, sessionID)
	if err != nil {
		return 0, errs.Wrap(errcode.Internal, err, "event log: cannot read the last event of session %s", sessionID)
	}
	return seq, nil
}

// lastStored returns the seq of the session's latest durable event: what
// the log committed while this daemon writes the session (it knows the
// numbering and holds the lease: nobody else appends), else the store's,
// which another daemon may have written since.
func (l *Log) lastStored(ctx context.Context, s *session) (int64, error) {
	if s.known.Load() && l.owned(s) {
		return s.committed.Load(), nil
	}
	seq, err := l.st.LastSeq(ctx, s.id)
	if err != nil {
		return 0, errs.Wrap(errcode.Internal, err, "event log: cannot read the last event of session %s", s.id)
	}
	return seq, nil
}

// Close stops accepting events, waits until every queued event is committed
// (or has failed) and offered to subscribers, then ends every
// subscription and cursor. It does not close the store. Close is idempotent.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.qmu.Lock()
		l.closed = true
		l.qmu.Unlock()
		select {
		case l.wake <- struct{}{}:
		default:
		}
		<-l.writerDone

		l.mu.Lock()
		l.subsClosed = true
		var curs []*Cursor
		for _, s := range l.sessions {
			s.subMu.Lock()
			for c := range s.subs {
				curs = append(curs, c)
			}
			s.subMu.Unlock()
		}
		l.mu.Unlock()
		for _, c := range curs {
			if c.sub != nil {
				c.sub.stop(errShutdown()) // waits for its goroutine
			} else {
				c.end(errShutdown())
			}
		}
	})
	return nil
}
