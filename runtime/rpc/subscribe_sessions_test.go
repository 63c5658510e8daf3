package rpc

import (
	"errors"
	"testing"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// The send loop's queue: ready watches are served in turn (a watch that
// has more goes behind the others), a watch is queued once however often
// it is notified, an unwatched one is skipped, refusals go first, and
// nothing is queued once the stream ended.
func TestMuxServesReadyWatchesInTurn(t *testing.T) {
	m := &mux{watches: map[uint64]*muxWatch{}, signal: make(chan struct{}, 1)}
	a, b, c := &muxWatch{id: 1}, &muxWatch{id: 2}, &muxWatch{id: 3}
	for _, w := range []*muxWatch{a, b, c} {
		m.watches[w.id] = w
	}
	order := func(steps ...func()) []uint64 {
		var got []uint64
		for _, step := range steps {
			step()
		}
		for {
			resp, w := m.next()
			switch {
			case resp != nil:
				got = append(got, 1000+resp.GetWatchId())
			case w != nil:
				got = append(got, w.id)
			default:
				return got
			}
		}
	}
	check := func(name string, got []uint64, want ...uint64) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: served %v, want %v", name, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: served %v, want %v", name, got, want)
			}
		}
	}

	check("in the order they became ready, each once", order(func() {
		m.ready(b)
		m.ready(a)
		m.ready(b) // already queued
		m.ready(c)
	}), 2, 1, 3)

	// a has more after its turn: it goes behind b and c.
	m.ready(a)
	m.ready(b)
	m.ready(c)
	_, first := m.next()
	m.ready(first) // re-queued by the send loop
	check("a busy watch waits its turn", order(), 2, 3, 1)

	check("refusals before ready watches", order(func() {
		m.ready(a)
		m.control(&trellisv1.SubscribeSessionsResponse{WatchId: 9, Item: ended(errs.New(errcode.NotFound, "no session"))})
	}), 1009, 1)

	check("an unwatched watch is skipped", order(func() {
		m.ready(a)
		m.ready(b)
		m.mu.Lock()
		a.closed = true
		m.mu.Unlock()
	}), 2)

	m.closeAll()
	check("nothing after the stream ended", order(func() { m.ready(b); m.ready(c) }))
	if n := m.open(); n != 0 {
		t.Errorf("%d watches open after closeAll", n)
	}
}

func TestEndedCarriesTheCode(t *testing.T) {
	tests := []struct {
		err      error
		code     string
		msgShown bool
	}{
		{errs.New(errcode.NotFound, "session s-1 not found"), "not_found", true},
		{errs.New(errcode.PayloadTooLarge, "event 3 is too large"), "payload_too_large", true},
		{errors.New("disk I/O error at /secret/path"), "internal", false},
	}
	for _, tc := range tests {
		e := ended(tc.err).Ended
		if e.GetCode() != tc.code || (e.GetMessage() == tc.err.Error()) != tc.msgShown {
			t.Errorf("ended(%v) = %v, want code %s (message shown: %v)", tc.err, e, tc.code, tc.msgShown)
		}
	}
}
