package eventlog

import (
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"

	"github.com/trellis-run/trellis/runtime/store"
)

// FenceFunc tells under which lease this daemon writes a session's events
// (a fence whose Key is the session id): ok is false when it holds none
// (its events are then refused by the store with store.ErrLeaseLost
// instead of written).
type FenceFunc func(sessionID string) (f store.Fence, ok bool)

// WithFence makes every commit fenced (scale-out, docs/scale-out.md): the
// store writes a session's events only if its lease still has the owner and
// epoch fence returns, in the commit's own transaction, so that a daemon
// that lost a session can never add to its log.
func WithFence(fence FenceFunc) Option {
	return func(c *config) { c.fence = fence }
}

// storeWriter returns the writer a commit of the batch's sessions is made
// under: their fences (WithFence), or store.Unfenced for a log alone on
// its store.
func (l *Log) storeWriter(ps []*pending) store.Writer {
	if l.cfg.fence == nil {
		return store.Unfenced()
	}
	var fences []store.Fence
	for i, p := range ps {
		if i > 0 && p.s == ps[i-1].s {
			continue
		}
		fences = append(fences, l.fenceOf(p.s.id))
	}
	return store.Under(fences...)
}

// fenceOf returns this daemon's fence on session id; when it holds no
// lease, a fence that matches no lease row (the store refuses the write).
func (l *Log) fenceOf(id string) store.Fence {
	f, ok := l.cfg.fence(id)
	if !ok {
		return store.Fence{Key: id}
	}
	return f
}

// Reload forgets what the log knows of the session's numbering, so that the
// next append reads the last seq from the store: a daemon calls it when it
// acquires a session's lease, since another daemon may have appended since.
// Nothing of the session may be queued then (it held no lease).
func (l *Log) Reload(sessionID string) {
	l.mu.Lock()
	s := l.sessions[sessionID]
	l.mu.Unlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	s.loaded = false
	s.known.Store(false)
	s.mu.Unlock()
}

// Watched returns the sessions that have at least one subscription.
func (l *Log) Watched() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id, s := range l.sessions {
		s.subMu.Lock()
		n := len(s.subs)
		s.subMu.Unlock()
		if n > 0 {
			out = append(out, id)
		}
	}
	return out
}

// Notice is one event of a retraction notice (Retract).
type Notice struct {
	Kind    string
	Payload any
}

// Retract tells the session's open cursors that this daemon lost the
// session's lease: each delivers the notice's events from memory, marked
// Retracted and never stored, all under the seq after the last stored
// event it returned, and then reads on from there. Whatever it returned
// from memory (held events, Unstored) after that event is void: this
// daemon can never store it, and the log gives those seqs to the events
// of the session's new owner, which the cursors read from the store as
// they are committed (Wake). The daemon calls it once a deposed session's
// turn has stopped (docs/scale-out.md).
func (l *Log) Retract(sessionID string, notice ...Notice) error {
	evs := make([]store.Event, 0, len(notice))
	ts := l.cfg.now().UTC().Truncate(time.Microsecond)
	for _, n := range notice {
		data, err := l.encode(n.Kind, n.Payload)
		if err != nil {
			return errs.Wrap(errcode.Internal, err, "event log: the %s notice of session %s cannot be encoded", n.Kind, sessionID)
		}
		evs = append(evs, store.Event{SessionID: sessionID, Kind: n.Kind, Payload: data, TS: ts, Retracted: true})
	}
	if len(evs) == 0 {
		return nil
	}
	for _, c := range l.cursors(sessionID) {
		c.retract(evs)
	}
	return nil
}
