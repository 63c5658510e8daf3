package ws

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
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
}

// Read reads through the frame guard (the library reads the raw
// connection after the handshake).
func (h *holdConn) Read(p []byte) (int, error) { return h.r.Read(p) }

func (h *holdConn) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hold {
		h.buf = append(h.buf, p...)
		return len(p), nil
	}
	return h.Conn.Write(p)
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
	// While held, a message is only appended to the hold buffer: it cannot
	// block on the peer, so it is written without the library's per-write
	// timeout (a context.AfterFunc each); release honours ctx's deadline.
	wctx := context.WithoutCancel(ctx)
	var err error
	for _, f := range frames {
		if err = c.ws.Write(wctx, websocket.MessageText, f); err != nil {
			break
		}
	}
	deadline, _ := ctx.Deadline()
	if rerr := c.hold.release(deadline); err == nil {
		err = rerr
	}
	return err
}
