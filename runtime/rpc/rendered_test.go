package rpc

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/trellis-run/trellis/facade/codec"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/store"
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
// larger event alone), each object codec.AppendRawEvent of the event.
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
		t.Run(tc.name, func(t *testing.T) {
			p := &renderedPage{sessionID: "s-1"}
			var want []string
			for i, pl := range tc.payloads {
				e := store.Event{SessionID: "s-1", Seq: int64(i + 10), Kind: "message.delta", TS: ts, Payload: pl}
				if i%2 == 0 {
					if err := p.addEvent(&e); err != nil {
						t.Fatal(err)
					}
				} else if err := p.addRow(&store.EventRow{Seq: e.Seq, Kind: []byte(e.Kind), Payload: pl, TS: ts}); err != nil {
					t.Fatal(err)
				}
				want = append(want, string(codec.AppendRawEvent(nil, EventToRaw(e))))
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
