package ws

import (
	"bytes"
	"strings"
	"testing"
)

// track follows frames however the library's bytes are cut into Writes,
// as long as each frame starts a Write, and notes a close frame.
func TestTrackFrames(t *testing.T) {
	long := bytes.Repeat([]byte("y"), 70000)
	tests := []struct {
		name   string
		writes [][]byte
		closed bool
	}{
		{"ping", [][]byte{{0x89, 0}}, false},
		{"text then close", [][]byte{appendTextMessage(nil, []byte("hi")), {0x88, 2, 3, 0xe8}}, true},
		{"long text in pieces", [][]byte{appendTextMessage(nil, long)[:1024], appendTextMessage(nil, long)[1024:]}, false},
		{"long text then close", [][]byte{appendTextMessage(nil, long)[:1024], appendTextMessage(nil, long)[1024:], {0x88, 0}}, true},
		{"close byte inside a payload", [][]byte{appendTextMessage(nil, []byte(strings.Repeat("\x88", 300)))[:200], appendTextMessage(nil, []byte(strings.Repeat("\x88", 300)))[200:]}, false},
		{"medium", [][]byte{appendTextMessage(nil, bytes.Repeat([]byte("z"), 500)), {0x8a, 0}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &holdConn{}
			for _, w := range tc.writes {
				h.track(w)
			}
			if h.closed != tc.closed || h.rest != 0 {
				t.Errorf("closed %v rest %d, want closed %v rest 0", h.closed, h.rest, tc.closed)
			}
		})
	}
}

func TestAppendTextMessageHeaders(t *testing.T) {
	for _, tc := range []struct {
		n    int
		head []byte
	}{
		{0, []byte{0x81, 0}},
		{125, []byte{0x81, 125}},
		{126, []byte{0x81, 126, 0, 126}},
		{65535, []byte{0x81, 126, 0xff, 0xff}},
		{65536, []byte{0x81, 127, 0, 0, 0, 0, 0, 1, 0, 0}},
	} {
		b := appendTextMessage([]byte("pre"), bytes.Repeat([]byte("p"), tc.n))
		if !bytes.HasPrefix(b[3:], tc.head) || len(b) != 3+len(tc.head)+tc.n {
			t.Errorf("%d bytes: header % x, length %d", tc.n, b[3:3+len(tc.head)], len(b))
		}
	}
}
