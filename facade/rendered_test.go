package facade

import (
	"bytes"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/facade/jsonrpc"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// The frames made of a rendered page are jsonrpc.NotificationFrame of
// each of its objects, byte for byte.
func TestRenderedFramesAreNotificationFrames(t *testing.T) {
	objs := []string{
		`{"sessionId":"s-1","seq":1,"kind":"message.delta","payload":{"text":"a,b}"},"ts":"2026-01-02T03:04:05.678Z"}`,
		`{"sessionId":"s-1","seq":2,"kind":"turn.done","payload":null,"ts":"2026-01-02T03:04:05.679Z","unstored":true}`,
		`{"sessionId":"s-1","seq":3,"kind":"x","payload":{},"ts":"2026-01-02T03:04:05.680Z"}`,
	}
	re := &trellisv1.RenderedEvents{Json: []byte(strings.Join(objs, ","))}
	end := -1
	for i, o := range objs {
		end += len(o) + 1
		re.Ends = append(re.Ends, uint32(end))
		re.Seqs = append(re.Seqs, int64(i+1))
	}
	if err := checkRendered(re); err != nil {
		t.Fatal(err)
	}
	frames := appendRenderedFrames([][]byte{[]byte("kept")}, re)
	if len(frames) != len(objs)+1 || string(frames[0]) != "kept" {
		t.Fatalf("got %d frames (first %q), want the kept one and %d", len(frames), frames[0], len(objs))
	}
	for i, o := range objs {
		if want := jsonrpc.NotificationFrame("session.event", []byte(o)); !bytes.Equal(frames[i+1], want) {
			t.Errorf("frame %d:\n%s\nwant\n%s", i, frames[i+1], want)
		}
	}
	// A frame cannot grow into the next one.
	_ = append(frames[1], "xxxx"...)
	if !bytes.Equal(frames[2], jsonrpc.NotificationFrame("session.event", []byte(objs[1]))) {
		t.Error("appending to a frame changed the next one")
	}
}

func TestCheckRendered(t *testing.T) {
	tests := []struct {
		name string
		re   *trellisv1.RenderedEvents
		ok   bool
	}{
		{"one", &trellisv1.RenderedEvents{Json: []byte(`{}`), Ends: []uint32{2}, Seqs: []int64{1}}, true},
		{"two", &trellisv1.RenderedEvents{Json: []byte(`{},{}`), Ends: []uint32{2, 5}, Seqs: []int64{1, 2}}, true},
		{"empty", &trellisv1.RenderedEvents{}, false},
		{"fewer seqs", &trellisv1.RenderedEvents{Json: []byte(`{},{}`), Ends: []uint32{2, 5}, Seqs: []int64{1}}, false},
		{"past the end", &trellisv1.RenderedEvents{Json: []byte(`{}`), Ends: []uint32{3}, Seqs: []int64{1}}, false},
		{"not rising", &trellisv1.RenderedEvents{Json: []byte(`{},{}`), Ends: []uint32{2, 2}, Seqs: []int64{1, 2}}, false},
		{"empty object", &trellisv1.RenderedEvents{Json: []byte(`{}`), Ends: []uint32{0}, Seqs: []int64{1}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkRendered(tc.re); (err == nil) != tc.ok {
				t.Errorf("checkRendered = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
