package ws

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// holdConn is the accepted connection under the WebSocket library. While
// held, writes collect in buf and go out in one write when released: the
// library flushes after every message, and a batch of ready frames should
// cost one system call, not one each.
type holdConn struct {
	net.Conn
	r    io.Reader // the connection's bytes, through the frame guard
	mu   sync.Mutex
	hold bool
	buf  []byte
	// The library's frames as they pass (see track): the payload bytes
	// left of the current one, and whether a close frame went out (no
	// message may follow it).
	rest   int64
	closed bool
}

// Read reads through the frame guard (the library reads the raw
// connection after the handshake).
func (h *holdConn) Read(p []byte) (int, error) { return h.r.Read(p) }

func (h *holdConn) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.track(p)
	if h.hold {
		h.buf = append(h.buf, p...)
		return len(p), nil
	}
	return h.Conn.Write(p)
}

// track follows the frames the library writes, to know when it has sent a
// close frame. Each of its frames starts at the start of a Write, header
// whole: the library flushes its buffer (1 KiB, larger than any header)
// at the end of every frame, so a frame's header is always the first
// bytes of its buffer; a long payload goes on in further Writes.
func (h *holdConn) track(p []byte) {
	for len(p) > 0 {
		if h.rest > 0 {
			n := min(int64(len(p)), h.rest)
			h.rest -= n
			p = p[n:]
			continue
		}
		if len(p) < 2 {
			return
		}
		if p[0]&0x0f == 0x8 {
			h.closed = true
		}
		hdr, n := 2, int64(p[1]&0x7f)
		switch n {
		case 126:
			hdr = 4
			if len(p) >= hdr {
				n = int64(binary.BigEndian.Uint16(p[2:4]))
			}
		case 127:
			hdr = 10
			if len(p) >= hdr {
				n = int64(binary.BigEndian.Uint64(p[2:10]) & (1<<63 - 1))
			}
		}
		if p[1]&0x80 != 0 {
			hdr += 4 // masked (a client's frame; not the server's)
		}
		if len(p) < hdr {
			return
		}
		h.rest = n
		p = p[hdr:]
	}
}

func (h *holdConn) setHold() {
	h.mu.Lock()
	h.hold = true
	h.mu.Unlock()
}

// release writes what was held, within deadline (zero: none).
func (h *holdConn) release(deadline time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hold = false
	if len(h.buf) == 0 {
		return nil
	}
	_ = h.Conn.SetWriteDeadline(deadline)
	_, err := h.Conn.Write(h.buf)
	_ = h.Conn.SetWriteDeadline(time.Time{})
	if cap(h.buf) > maxHeld {
		h.buf = nil // do not keep a burst's buffer for the connection's life
	} else {
		h.buf = h.buf[:0]
	}
	return err
}

// holdHijacker hands the library a holdConn instead of the raw connection.
type holdHijacker struct {
	http.ResponseWriter
	conn  *holdConn
	limit int64 // frames announced over it close the connection
}

func (w *holdHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("ws: the response writer cannot be hijacked")
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := brw.Writer.Flush(); err != nil {
		c.Close()
		return nil, nil, err
	}
	// One guarded stream: what the handshake reader already buffered (a
	// copy, so that the server's 4 KiB reader is not kept), then the
	// connection; the library reads both through it.
	var r io.Reader = c
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		r = io.MultiReader(bytes.NewReader(bytes.Clone(b)), c)
	}
	guard := &frameGuard{r: r, limit: w.limit, tooLarge: func(e *ErrFrameTooLarge) { closeTooBig(c, e) }}
	w.conn = &holdConn{Conn: c, r: guard}
	// Small buffers: every write goes through holdConn (one system call per
	// batch whatever the buffer), and reads of large frames bypass it.
	return w.conn, bufio.NewReadWriter(bufio.NewReaderSize(guard, bufSize), bufio.NewWriterSize(w.conn, bufSize)), nil
}

// maxHeld is the largest hold buffer kept between writes, and the size
// above which a lone frame is written without holding.
const maxHeld = 64 << 10

// bufSize is the size of each of the library's buffers of an accepted
// connection (it allocates none of its own).
const bufSize = 1024

// WriteMessages writes frames as text messages, in order, with as few
// system calls as the buffering allows (one for a batch of small frames).
func (c *Conn) WriteMessages(ctx context.Context, frames [][]byte) error {
	if c.hold == nil || (len(frames) == 1 && len(frames[0]) > maxHeld) {
		// A large frame is written as it is (a copy in the hold buffer
		// would save no system call worth its memory).
		for _, f := range frames {
			if err := c.ws.Write(ctx, websocket.MessageText, f); err != nil {
				return err
			}
		}
		return nil
	}
	c.hold.setHold()
	err := c.hold.appendTextMessages(frames)
	deadline, _ := ctx.Deadline()
	if rerr := c.hold.release(deadline); err == nil {
		err = rerr
	}
	return err
}

// appendTextMessages appends each frame to the hold buffer as one
// unfragmented, unmasked text message (RFC 6455 §5.2: what the library
// writes for a server's Write, without its per-message locking, timeout
// and flush). It is safe beside the library's own writes: those are
// control frames (ping, pong, close; at most 131 bytes), each reaching
// holdConn in one Write of a whole frame — the library's 1 KiB buffer is
// flushed at the end of every frame — and this connection's data messages
// are all written by the one JSON-RPC writer, so no message is ever cut by
// another. Once the library has sent a close frame, no message follows
// (net.ErrClosed, as the library answers then). No extension is negotiated (the library's default), so a
// message needs no RSV bit.
func (h *holdConn) appendTextMessages(frames [][]byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		// The library sent a close frame: nothing may follow it.
		return net.ErrClosed
	}
	n := 0
	for _, f := range frames {
		n += len(f) + 10
	}
	h.buf = slices.Grow(h.buf, n)
	for _, f := range frames {
		h.buf = appendTextMessage(h.buf, f)
	}
	return nil
}

// appendTextMessage appends p as one final, unmasked text frame.
func appendTextMessage(b, p []byte) []byte {
	const finText = 0x80 | 0x1
	switch n := len(p); {
	case n < 126:
		b = append(b, finText, byte(n))
	case n <= 0xffff:
		b = append(b, finText, 126, byte(n>>8), byte(n))
	default:
		b = append(b, finText, 127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return append(b, p...)
}
