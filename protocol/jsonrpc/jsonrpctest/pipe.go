// Package jsonrpctest provides an in-memory jsonrpc.Transport pair for tests
// of the JSON-RPC layer and of handlers built on it.
package jsonrpctest

import (
	"context"
	"io"
	"sync"

	"github.com/trellis-run/trellis/protocol/jsonrpc"
)

// pipeBuffer is how many frames each direction holds before a writer waits.
const pipeBuffer = 4096

// Pipe returns two connected transports: what one writes, the other reads.
// Closing either end closes both; frames already written stay readable.
func Pipe() (a, b jsonrpc.Transport) {
	ab := make(chan []byte, pipeBuffer)
	ba := make(chan []byte, pipeBuffer)
	shared := &pipeState{closed: make(chan struct{})}
	return &pipeEnd{in: ba, out: ab, state: shared}, &pipeEnd{in: ab, out: ba, state: shared}
}

type pipeState struct {
	once   sync.Once
	closed chan struct{}
}

type pipeEnd struct {
	in    <-chan []byte
	out   chan<- []byte
	state *pipeState
}

// ReadMessage returns the next frame, or io.EOF once the pipe is closed and
// drained.
func (p *pipeEnd) ReadMessage(ctx context.Context) ([]byte, error) {
	select {
	case m := <-p.in:
		return m, nil
	default:
	}
	select {
	case m := <-p.in:
		return m, nil
	case <-p.state.closed:
		select {
		case m := <-p.in:
			return m, nil
		default:
			return nil, io.EOF
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// WriteMessage sends a copy of data.
func (p *pipeEnd) WriteMessage(ctx context.Context, data []byte) error {
	select {
	case <-p.state.closed:
		return io.ErrClosedPipe
	default:
	}
	frame := append([]byte(nil), data...)
	select {
	case p.out <- frame:
		return nil
	case <-p.state.closed:
		return io.ErrClosedPipe
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close closes both ends.
func (p *pipeEnd) Close() error {
	p.state.once.Do(func() { close(p.state.closed) })
	return nil
}
