package jsonrpc

import (
	"context"
	"encoding/json"
	"sync/atomic"

	"github.com/trellis-run/trellis/protocol/errcode"
)

// Gate returns a Handler for one connection that answers unauthorized to
// every call until a call of first (system.hello) has succeeded on it, and
// passes everything to next from then on (PROTOCOL.md §3). A call that
// arrives while first is still running is refused too. Make one Gate per
// connection.
func Gate(first string, next Handler) Handler {
	return &gate{first: first, next: next}
}

type gate struct {
	first string
	next  Handler
	open  atomic.Bool
}

func (g *gate) Handle(ctx context.Context, c *Conn, method string, params json.RawMessage) (any, *Error) {
	if g.open.Load() {
		return g.next.Handle(ctx, c, method, params)
	}
	if method != g.first {
		return nil, errcode.NewUnauthorized("call " + g.first + " first")
	}
	result, err := g.next.Handle(ctx, c, method, params)
	if err == nil {
		g.open.Store(true)
	}
	return result, err
}

// Opened reports whether h is a Gate that has opened; false for any other
// Handler.
func Opened(h Handler) bool {
	g, ok := h.(*gate)
	return ok && g.open.Load()
}
