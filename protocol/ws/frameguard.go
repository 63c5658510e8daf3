package ws

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"
)

// closeTooBig sends a close frame with status 1009 (message too big) and
// the reason, as the library does for a frame that passed its limit.
func closeTooBig(c net.Conn, e *ErrFrameTooLarge) {
	reason := fmt.Sprintf("frame of %d bytes over the limit of %d", e.Length, e.Limit)
	if len(reason) > 123 {
		reason = reason[:123]
	}
	frame := []byte{0x88, byte(2 + len(reason)), 0x03, 0xf1}
	frame = append(frame, reason...)
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(frame)
	_ = c.Close()
}

// frameGuard watches the frame headers a client sends, as they pass on
// their way to the WebSocket library, and fails the read as soon as a
// header announces a payload over limit. The library checks its read limit
// only while payload bytes arrive, so a header announcing 2^62 bytes and
// then nothing would hold the connection open; this closes it at once.
type frameGuard struct {
	r     io.Reader
	limit int64

	hdr  [14]byte // the header being read
	have int      // bytes of hdr read
	skip uint64   // payload bytes of the current frame still to pass
	err  error
	// tooLarge, when set, is told first (it sends the close frame).
	tooLarge func(*ErrFrameTooLarge)
}

// ErrFrameTooLarge is the read error of a frame announced over the limit.
type ErrFrameTooLarge struct{ Length, Limit uint64 }

func (e *ErrFrameTooLarge) Error() string {
	return fmt.Sprintf("ws: a frame header announces %d bytes, over the limit of %d: connection closed", e.Length, e.Limit)
}

func (g *frameGuard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.r.Read(p)
	if ferr := g.scan(p[:n]); ferr != nil {
		g.err = ferr
		if g.tooLarge != nil {
			g.tooLarge(ferr)
		}
		return 0, ferr
	}
	return n, err
}

// scan follows the frames in b, which continue the stream read so far.
func (g *frameGuard) scan(b []byte) *ErrFrameTooLarge {
	for len(b) > 0 {
		if g.skip > 0 {
			step := min(uint64(len(b)), g.skip)
			g.skip -= step
			b = b[step:]
			continue
		}
		g.hdr[g.have] = b[0]
		g.have++
		b = b[1:]
		need := headerLen(g.hdr[:g.have])
		if need < 0 || g.have < need {
			continue
		}
		length := payloadLen(g.hdr[:g.have])
		if length > uint64(g.limit) {
			return &ErrFrameTooLarge{Length: length, Limit: uint64(g.limit)}
		}
		g.skip, g.have = length, 0
	}
	return nil
}

// headerLen is the length of the frame header starting with h, or -1 when
// h is too short to tell.
func headerLen(h []byte) int {
	if len(h) < 2 {
		return -1
	}
	n := 2
	switch h[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if h[1]&0x80 != 0 {
		n += 4 // masking key
	}
	return n
}

// payloadLen is the payload length of the complete header h.
func payloadLen(h []byte) uint64 {
	switch l := h[1] & 0x7f; l {
	case 126:
		return uint64(binary.BigEndian.Uint16(h[2:4]))
	case 127:
		return binary.BigEndian.Uint64(h[2:10])
	default:
		return uint64(l)
	}
}
