package rpc

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// TestReadAhead: the page after an answer is read ahead only for a client
// that pages (it asked for the page after an earlier answer); a request
// takes it once; a page read ahead that caught up, or whose read failed,
// is not used (the request reads its own).
func TestReadAhead(t *testing.T) {
	ctx := context.Background()
	page := &trellisv1.EventPage{Seqs: []int64{11}}
	for _, tc := range []struct {
		name       string
		paging     bool
		more       bool
		err        error
		wantReads  int32
		wantPage   bool
		wantPaging bool
	}{
		{name: "first answer: marked, not read", paging: false, more: true, wantReads: 0, wantPage: false, wantPaging: true},
		{name: "paging: read ahead and taken", paging: true, more: true, wantReads: 1, wantPage: true, wantPaging: true},
		{name: "read ahead caught up: not used", paging: true, more: false, wantReads: 1, wantPage: false, wantPaging: true},
		{name: "read ahead failed: not used", paging: true, more: true, err: errors.New("store down"), wantReads: 1, wantPage: false, wantPaging: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r readAhead
			var reads atomic.Int32
			key := pageKey{"s1", 10}
			r.ended(key, tc.paging, func(context.Context) (*trellisv1.EventPage, bool, error) {
				reads.Add(1)
				return page, tc.more, tc.err
			})
			got, more, paging := r.take(ctx, key)
			if n := reads.Load(); n != tc.wantReads {
				t.Errorf("%d reads ahead, want %d", n, tc.wantReads)
			}
			if (got != nil) != tc.wantPage || (got != nil && (got != page || !more)) {
				t.Errorf("take: page %v more %v, want a page: %v", got, more, tc.wantPage)
			}
			if paging != tc.wantPaging {
				t.Errorf("take: paging %v, want %v", paging, tc.wantPaging)
			}
			// Taken once: a second request for the same page reads its own.
			if got, _, paging := r.take(ctx, key); got != nil || paging {
				t.Errorf("second take: page %v paging %v, want nothing", got, paging)
			}
		})
	}
}

// TestReadAheadBounded: ends older than aheadTTL are dropped, at most
// maxAhead are kept, and an unknown request is not paging.
func TestReadAheadBounded(t *testing.T) {
	ctx := context.Background()
	var r readAhead
	none := func(context.Context) (*trellisv1.EventPage, bool, error) { return nil, false, nil }
	if _, _, paging := r.take(ctx, pageKey{"s", 1}); paging {
		t.Fatal("an unknown request is paging")
	}
	for i := range maxAhead + 10 {
		r.ended(pageKey{"s", int64(i)}, false, none)
	}
	if n := len(r.pages); n != maxAhead {
		t.Fatalf("%d ends kept, want %d", n, maxAhead)
	}
	if _, _, paging := r.take(ctx, pageKey{"s", maxAhead + 5}); paging {
		t.Error("an end past the bound was kept")
	}
	// Age every end past the TTL: the next one drops them.
	r.mu.Lock()
	for _, p := range r.pages {
		p.at = p.at.Add(-aheadTTL - time.Second)
	}
	r.mu.Unlock()
	r.ended(pageKey{"t", 1}, false, none)
	if n := len(r.pages); n != 1 {
		t.Fatalf("%d ends kept after the TTL, want 1", n)
	}
}

// TestReadAheadTakeWaitsForItsRequest: a request that ends while its page
// is still being read does not wait for it.
func TestReadAheadTakeWaitsForItsRequest(t *testing.T) {
	var r readAhead
	release := make(chan struct{})
	defer close(release)
	r.ended(pageKey{"s", 1}, true, func(context.Context) (*trellisv1.EventPage, bool, error) {
		<-release
		return &trellisv1.EventPage{}, true, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got, _, paging := r.take(ctx, pageKey{"s", 1}); got != nil || !paging {
		t.Errorf("take with an ended context: page %v paging %v, want no page, paging", got, paging)
	}
}
