package rpc

import (
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/runtime/store"
)

// A page holds each event as codec.AppendStoredEvent renders it, with its
// end and seq, in a shape codec.PageObjects reads back; reset empties it.
func TestEventPage(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	p := newEventPage("s-1")
	defer p.release()
	var want []string
	for i, pl := range []string{`{"text":"a,b}"}`, ``, `{"turnId":"t","reason":"complete"}`, strings.Repeat(" ", 3)} {
		e := store.Event{SessionID: "s-1", Seq: int64(i + 10), Kind: "message.delta", TS: ts.Add(time.Duration(i) * time.Second), Payload: []byte(pl), Unstored: i == 1}
		if err := p.add(&e); err != nil {
			t.Fatal(err)
		}
		want = append(want, string(codec.AppendStoredEvent(nil, e.SessionID, e.Seq, e.Kind, e.TS, e.Payload, codec.DeliveryOf(e.Unstored, e.Retracted))))
	}
	objs, err := codec.PageObjects(p.message(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if string(objs[i]) != want[i] || p.seqs[i] != int64(i+10) {
			t.Errorf("event %d (seq %d):\n%s\nwant\n%s", i, p.seqs[i], objs[i], want[i])
		}
	}
	p.reset()
	if len(p.json) != 0 || len(p.ends) != 0 || len(p.seqs) != 0 {
		t.Error("the page is not empty after reset")
	}
}
