package ws_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/trellis-run/trellis/protocol/ws"
)

// A batch of messages written at once reaches a stock client as the same
// messages, whatever their sizes (each length encoding of RFC 6455), with
// the server's pings in between; after the server closes, a batch fails.
func TestWriteMessagesSizes(t *testing.T) {
	s := newServer(t, ws.Options{PingInterval: time.Millisecond, PongTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	raw, _, err := websocket.Dial(ctx, s.url(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.CloseNow()
	raw.SetReadLimit(1 << 20)
	srv := <-s.accepted
	sizes := []int{0, 1, 125, 126, 127, 1000, 1024, 65535, 65536, 70000}
	var rounds [][][]byte
	for round := 0; round < 20; round++ {
		var frames [][]byte
		for i, n := range sizes {
			frames = append(frames, []byte(fmt.Sprintf("%d/%d:", round, i)+strings.Repeat("x", n)))
		}
		rounds = append(rounds, frames)
	}
	// The client reads while the server writes: 4 MiB of frames need not
	// fit in the socket buffers.
	read := make(chan error, 1)
	go func() {
		for _, frames := range rounds {
			for _, w := range frames {
				typ, got, err := raw.Read(ctx)
				if err != nil {
					read <- fmt.Errorf("message %.8q: %w", w, err)
					return
				}
				if typ != websocket.MessageText || !bytes.Equal(got, w) {
					read <- fmt.Errorf("%v of %d bytes %.20q, want text of %d bytes %.20q", typ, len(got), got, len(w), w)
					return
				}
			}
		}
		read <- nil
	}()
	for _, frames := range rounds {
		if err := srv.WriteMessages(ctx, frames); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, _, err := raw.Read(ctx); err != nil {
				return // the close handshake's answer is sent by Read
			}
		}
	}()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.WriteMessages(ctx, [][]byte{[]byte("a"), []byte("b")}); err == nil {
		t.Fatal("WriteMessages after the close frame succeeded")
	}
}
