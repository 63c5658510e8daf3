package facade

import (
	"bytes"
	"strings"
	"testing"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
)

// renderedItem is a rendered_events item of frames as the runtime sends
// it with rendered_frames: each object in its notification frame.
func renderedItem(objs ...string) *trellisv1.RenderedEvents {
	re := &trellisv1.RenderedEvents{}
	for i, o := range objs {
		if i > 0 {
			re.Json = append(re.Json, ',')
		}
		re.Json = append(re.Json, jsonrpc.NotificationFrame("session.event", []byte(o))...)
		re.Ends = append(re.Ends, uint32(len(re.Json)))
		re.Seqs = append(re.Seqs, int64(i+1))
	}
	return re
}

// The frames of a rendered page are its bytes as they are (slices, no
// copy): jsonrpc.NotificationFrame of each object, byte for byte, and
// renderedObject gives the object back. A page of plain objects (from a
// runtime older than rendered_frames) makes the same frames, copied.
func TestRenderedFramesAreNotificationFrames(t *testing.T) {
	objs := []string{
		`{"sessionId":"s-1","seq":1,"kind":"message.delta","payload":{"text":"a,b}"},"ts":"2026-01-02T03:04:05.678Z"}`,
		`{"sessionId":"s-1","seq":2,"kind":"turn.done","payload":null,"ts":"2026-01-02T03:04:05.679Z","unstored":true}`,
		`{"sessionId":"s-1","seq":3,"kind":"x","payload":{},"ts":"2026-01-02T03:04:05.680Z"}`,
	}
	re := renderedItem(objs...)
	framed, err := checkRendered(re)
	if err != nil || !framed {
		t.Fatalf("checkRendered = %v, %v; want framed", framed, err)
	}
	frames := appendRenderedFrames([][]byte{[]byte("kept")}, re, true)
	if len(frames) != len(objs)+1 || string(frames[0]) != "kept" {
		t.Fatalf("got %d frames (first %q), want the kept one and %d", len(frames), frames[0], len(objs))
	}
	for i, o := range objs {
		if want := jsonrpc.NotificationFrame("session.event", []byte(o)); !bytes.Equal(frames[i+1], want) {
			t.Errorf("frame %d:\n%s\nwant\n%s", i, frames[i+1], want)
		}
		if got := renderedObject(frames[i+1], true); string(got) != o {
			t.Errorf("object %d: %s, want %s", i, got, o)
		}
		if &frames[i+1][0] != &re.Json[strings.Index(string(re.Json), string(frames[i+1]))] {
			t.Errorf("frame %d is a copy", i)
		}
	}
	// A frame cannot grow into the next one.
	_ = append(frames[1], "xxxx"...)
	if !bytes.Equal(frames[2], jsonrpc.NotificationFrame("session.event", []byte(objs[1]))) {
		t.Error("appending to a frame changed the next one")
	}

	plain := &trellisv1.RenderedEvents{Json: []byte(strings.Join(objs, ","))}
	for i := range objs {
		plain.Ends = append(plain.Ends, uint32(len(strings.Join(objs[:i+1], ","))))
		plain.Seqs = append(plain.Seqs, int64(i+1))
	}
	if framed, err := checkRendered(plain); err != nil || framed {
		t.Fatalf("plain objects: checkRendered = %v, %v; want not framed", framed, err)
	}
	copied := appendRenderedFrames(nil, plain, false)
	for i := range objs {
		if !bytes.Equal(copied[i], frames[i+1]) {
			t.Errorf("frame %d of plain objects:\n%s\nwant\n%s", i, copied[i], frames[i+1])
		}
		if got := renderedObject(plain.Json[len(strings.Join(objs[:i], ","))+min(i, 1):plain.Ends[i]], false); string(got) != objs[i] {
			t.Errorf("plain object %d: %s", i, got)
		}
	}
}

func TestCheckRendered(t *testing.T) {
	two := renderedItem(`{}`, `{"a":1}`)
	frame := `{"jsonrpc":"2.0","method":"session.event","params":{}}`
	mixed := renderedItem(`{}`)
	mixed.Json = append(mixed.Json, `,{}`...)
	mixed.Ends, mixed.Seqs = append(mixed.Ends, uint32(len(mixed.Json))), append(mixed.Seqs, 2)
	tests := []struct {
		name   string
		re     *trellisv1.RenderedEvents
		ok     bool
		framed bool
	}{
		{"one", renderedItem(`{}`), true, true},
		{"two", two, true, true},
		{"plain objects", &trellisv1.RenderedEvents{Json: []byte(`{},{"a":1}`), Ends: []uint32{2, 9}, Seqs: []int64{1, 2}}, true, false},
		{"frames and objects", mixed, false, false},
		{"empty", &trellisv1.RenderedEvents{}, false, false},
		{"fewer seqs", &trellisv1.RenderedEvents{Json: two.Json, Ends: two.Ends, Seqs: two.Seqs[:1]}, false, false},
		{"past the end", &trellisv1.RenderedEvents{Json: []byte(frame), Ends: []uint32{uint32(len(frame) + 1)}, Seqs: []int64{1}}, false, false},
		{"not rising", &trellisv1.RenderedEvents{Json: two.Json, Ends: []uint32{two.Ends[0], two.Ends[0]}, Seqs: two.Seqs}, false, false},
		{"empty object", &trellisv1.RenderedEvents{Json: []byte(frame), Ends: []uint32{0}, Seqs: []int64{1}}, false, false},
		{"another method, taken as an object", &trellisv1.RenderedEvents{Json: []byte(`{"jsonrpc":"2.0","method":"session.other","params":{}}`), Ends: []uint32{54}, Seqs: []int64{1}}, true, false},
		{"a frame cut short, taken as an object", &trellisv1.RenderedEvents{Json: []byte(frame[:len(frame)-2]), Ends: []uint32{uint32(len(frame) - 2)}, Seqs: []int64{1}}, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			framed, err := checkRendered(tc.re)
			if (err == nil) != tc.ok || framed != tc.framed {
				t.Errorf("checkRendered = %v, %v; want ok %v, framed %v", framed, err, tc.ok, tc.framed)
			}
		})
	}
}
