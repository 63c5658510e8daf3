package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

type sentItems struct {
	grpc.ServerStreamingServer[trellisv1.SubscribeResponse]
	items []*trellisv1.RenderedEvents
}

func (s *sentItems) Send(r *trellisv1.SubscribeResponse) error {
	re := r.GetRenderedEvents()
	// Send encodes the message: keep a copy, as the wire would.
	s.items = append(s.items, &trellisv1.RenderedEvents{Json: bytes.Clone(re.GetJson()),
		Ends: append([]uint32(nil), re.GetEnds()...), Seqs: append([]int64(nil), re.GetSeqs()...)})
	return nil
}

// A rendered page goes out in items of at most maxBatchBytes of JSON (a
// larger event alone), each object codec.AppendRawEvent of the event, in
// its jsonrpc.NotificationFrame with frames.
func TestRenderedPageItems(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	small := []byte(`{"text":"x"}`)
	big := []byte(`{"text":"` + strings.Repeat("y", maxBatchBytes) + `"}`)
	mid := []byte(`{"text":"` + strings.Repeat("z", maxBatchBytes/3) + `"}`)
	tests := []struct {
		name     string
		payloads [][]byte
		items    []int // events per item
	}{
		{"one small", [][]byte{small}, []int{1}},
		{"small ones", [][]byte{small, small, small}, []int{3}},
		{"a big one alone", [][]byte{small, big, small}, []int{1, 1, 1}},
		{"big first", [][]byte{big, small}, []int{1, 1}},
		{"thirds", [][]byte{mid, mid, mid, mid}, []int{2, 2}},
	}
	for _, tc := range tests {
		for _, frames := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/frames %v", tc.name, frames), func(t *testing.T) {
				p := &renderedPage{sessionID: "s-1", frames: frames}
				var want []string
				for i, pl := range tc.payloads {
					e := store.Event{SessionID: "s-1", Seq: int64(i + 10), Kind: "message.delta", TS: ts, Payload: pl}
					if err := p.addEvent(&e); err != nil {
						t.Fatal(err)
					}
					obj := codec.AppendRawEvent(nil, EventToRaw(e))
					if frames {
						obj = jsonrpc.NotificationFrame("session.event", obj)
					}
					want = append(want, string(obj))
				}
				s := &sentItems{}
				if err := p.flush(s); err != nil {
					t.Fatal(err)
				}
				if len(p.json) != 0 || len(p.ends) != 0 || len(p.seqs) != 0 {
					t.Error("the page is not empty after flush")
				}
				var got []string
				var seqs []int64
				for i, it := range s.items {
					if i >= len(tc.items) || len(it.GetEnds()) != tc.items[i] {
						t.Errorf("item %d has %d events, want items of %v", i, len(it.GetEnds()), tc.items)
					}
					if n := len(it.GetJson()); n > maxBatchBytes && len(it.GetEnds()) > 1 {
						t.Errorf("item %d: %d bytes in %d events", i, n, len(it.GetEnds()))
					}
					start := 0
					for _, e := range it.GetEnds() {
						got = append(got, string(it.GetJson()[start:e]))
						start = int(e) + 1
					}
					if start != len(it.GetJson())+1 {
						t.Errorf("item %d: objects end at %d of %d bytes", i, start-1, len(it.GetJson()))
					}
					seqs = append(seqs, it.GetSeqs()...)
				}
				if len(got) != len(want) {
					t.Fatalf("%d events sent, want %d", len(got), len(want))
				}
				for i := range want {
					if got[i] != want[i] || seqs[i] != int64(i+10) {
						t.Errorf("event %d (seq %d):\n%.200s\nwant\n%.200s", i, seqs[i], got[i], want[i])
					}
				}
			})
		}
	}
}

// readOnly hides a store's EventScanner: scanStored falls back to ReadEvents.
type readOnly struct{ store.EventStore }

// scanStored hands over the same events through a store's EventScanner
// and through ReadEvents, stops on errPageFull without an error, and
// returns a callback's error as it is.
func TestScanStored(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateSession(ctx, store.Session{SessionID: "s-1", Kind: store.KindChat}); err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	var evs []store.Event
	for i := int64(1); i <= 10; i++ {
		kind := "message.delta"
		if i%4 == 0 {
			kind = "turn.done"
		}
		evs = append(evs, store.Event{SessionID: "s-1", Seq: i, Kind: kind, TS: ts, Payload: []byte(`{"turnId":"t` + strconv.FormatInt(i, 10) + `"}`)})
	}
	if err := st.AppendEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		st   store.EventStore
	}{{"scanner", st}, {"ReadEvents", readOnly{st}}} {
		t.Run(tc.name, func(t *testing.T) {
			s := &SessionServer{store: tc.st}
			var got []string
			n, size, err := s.scanStored(ctx, "s-1", 2, 5, func(e *store.Event) error {
				got = append(got, fmt.Sprintf("%d %s %s %s", e.Seq, e.Kind, e.TS.Format(time.RFC3339Nano), e.Payload))
				return nil
			})
			var want []string
			wantSize := 0
			for _, e := range evs[2:7] {
				want = append(want, fmt.Sprintf("%d %s %s %s", e.Seq, e.Kind, e.TS.Format(time.RFC3339Nano), e.Payload))
				wantSize += len(e.Payload) + eventOverhead
			}
			if err != nil || n != 5 || size != wantSize || !slices.Equal(got, want) {
				t.Errorf("scanStored = %d, %d, %v: %q; want 5, %d: %q", n, size, err, got, wantSize, want)
			}
			n, _, err = s.scanStored(ctx, "s-1", 0, 0, func(e *store.Event) error {
				if e.Seq == 3 {
					return errPageFull
				}
				return nil
			})
			if err != nil || n != 3 {
				t.Errorf("stopped on errPageFull: %d events, %v; want 3, nil", n, err)
			}
			_, _, err = s.scanStored(ctx, "s-1", 0, 0, func(*store.Event) error { return boom })
			if err != boom {
				t.Errorf("callback error: %v, want it as it is", err)
			}
		})
	}
}
