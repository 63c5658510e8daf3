package rpc

import (
	"context"
	"sync"
	"time"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// A client that pages through a long session with ResumeSession asks for
// each next page only once it has the last one, so with pages read on
// request the daemon's read of a page and the client's receipt of the one
// before never overlap (Subscribe's stream does overlap them). readAhead
// overlaps them: once a client has asked for the page that follows an
// answer (it pages), the page after the one it gets is read at once, and
// the request for it takes it. A client that reads one answer and then
// subscribes, as the WebSocket's session.resume does, costs no read ahead.
//
// Only pages with more events after them are kept: a read-ahead page that
// caught up could be stale by the time it is asked for, so the last page of
// a resume is read on request. Stored events do not change, so a page read
// ahead is the answer a request would have got when it was read; the caller
// is checked (the interceptors, session.Service.Resume) before each answer
// as before.
type readAhead struct {
	mu    sync.Mutex
	pages map[pageKey]*aheadPage
}

// pageKey names an answer by its request: the session and afterSeq.
type pageKey struct {
	session string
	after   int64
}

// aheadPage is an answer that ended where key begins (ready nil: no page
// read yet, the mark that a client may ask for it), or a page being read
// (ready closes when page, more and err are set).
type aheadPage struct {
	at    time.Time
	ready chan struct{}
	page  *trellisv1.EventPage
	more  bool
	err   error
}

const (
	// aheadTTL is how long an answer's end waits for its next request.
	aheadTTL = 5 * time.Second
	// maxAhead bounds the ends kept (pages read ahead are at most
	// MaxResumeBytes each).
	maxAhead = 64
)

// take removes and returns what is kept for key: paging is whether an
// earlier answer ended there; page is nil when no page was read ahead,
// or it was read but not usable.
func (r *readAhead) take(ctx context.Context, key pageKey) (page *trellisv1.EventPage, more, paging bool) {
	r.mu.Lock()
	p, ok := r.pages[key]
	delete(r.pages, key)
	r.mu.Unlock()
	if !ok || p.ready == nil {
		return nil, false, ok
	}
	select {
	case <-p.ready:
	case <-ctx.Done():
		return nil, false, true
	}
	if p.err != nil || !p.more {
		return nil, false, true
	}
	return p.page, true, true
}

// ended records that an answer ended at next (its session, its last seq);
// when the answer itself followed an earlier one (paging), read reads the
// next page at once.
func (r *readAhead) ended(next pageKey, paging bool, read func(context.Context) (*trellisv1.EventPage, bool, error)) {
	now := time.Now()
	p := &aheadPage{at: now}
	if paging {
		p.ready = make(chan struct{})
	}
	r.mu.Lock()
	if r.pages == nil {
		r.pages = map[pageKey]*aheadPage{}
	}
	for k, old := range r.pages {
		if now.Sub(old.at) > aheadTTL {
			delete(r.pages, k)
		}
	}
	full := len(r.pages) >= maxAhead
	if !full {
		r.pages[next] = p
	}
	r.mu.Unlock()
	if full || !paging {
		return
	}
	go func() {
		defer close(p.ready)
		ctx, cancel := context.WithTimeout(context.Background(), aheadTTL)
		defer cancel()
		p.page, p.more, p.err = read(ctx)
	}()
}
