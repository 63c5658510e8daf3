package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/ws"
)

// wsClient speaks the external protocol: JSON-RPC 2.0 over WebSocket.
type wsClient struct {
	conn   *ws.Conn
	nextID atomic.Int64

	mu      sync.Mutex
	waiting map[string]chan frame
	subs    map[string]chan map[string]any
	notes   chan frame // notifications other than session.event
	// onRequest answers server → client requests (approval.request);
	// nil answers every request with an error.
	onRequest func(method string, params json.RawMessage) (any, *errcode.Error)
	// gate, when set, stops the read loop until it is closed (a client
	// that reads nothing).
	gate atomic.Pointer[chan struct{}]
}

// pause stops reading frames until the returned function is called.
func (c *wsClient) pause() (resume func()) {
	ch := make(chan struct{})
	c.gate.Store(&ch)
	return sync.OnceFunc(func() { close(ch) })
}

type frame struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *errcode.Error  `json:"error,omitempty"`
}

// dialWS connects without saying hello.
func dialWS(t testing.TB, d *daemon.Daemon) *wsClient {
	t.Helper()
	return dialWSURL(t, fmt.Sprintf("ws://127.0.0.1:%d/ws", d.HTTPPort()))
}

// dialWSURL connects to a facade's WebSocket endpoint without saying hello.
func dialWSURL(t testing.TB, url string) *wsClient {
	t.Helper()
	conn, err := ws.Dial(context.Background(), url, ws.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &wsClient{conn: conn, waiting: map[string]chan frame{}, subs: map[string]chan map[string]any{}, notes: make(chan frame, 1024)}
	go c.readLoop()
	t.Cleanup(c.Close)
	return c
}

// helloWS connects and completes system.hello.
func helloWS(t testing.TB, d *daemon.Daemon) *wsClient {
	t.Helper()
	c := dialWS(t, d)
	if err := c.Call(context.Background(), "system.hello", map[string]any{
		"token": d.Token(), "clientVersion": "test", "protocolVersion": "1.0.0",
	}, nil); err != nil {
		t.Fatalf("hello: %v", err)
	}
	return c
}

func (c *wsClient) readLoop() {
	for {
		if g := c.gate.Load(); g != nil {
			<-*g
		}
		data, err := c.conn.ReadMessage(context.Background())
		if err != nil {
			return
		}
		var f frame
		if json.Unmarshal(data, &f) != nil {
			continue
		}
		switch {
		case f.Method != "" && f.ID != nil:
			go c.answer(f)
		case f.Method == "session.event":
			var ev map[string]any
			_ = json.Unmarshal(f.Params, &ev)
			c.channel(fmt.Sprint(ev["sessionId"])) <- ev
		case f.Method != "":
			select {
			case c.notes <- f:
			default:
			}
		default:
			c.mu.Lock()
			ch := c.waiting[string(f.ID)]
			delete(c.waiting, string(f.ID))
			c.mu.Unlock()
			if ch != nil {
				ch <- f
			}
		}
	}
}

func (c *wsClient) answer(f frame) {
	var result any
	var rerr *errcode.Error = errcode.New(errcode.Internal, "this test client answers no requests")
	if c.onRequest != nil {
		result, rerr = c.onRequest(f.Method, f.Params)
	}
	out := map[string]any{"jsonrpc": "2.0", "id": f.ID}
	if rerr != nil {
		out["error"] = rerr
	} else {
		out["result"] = result
	}
	b, _ := json.Marshal(out)
	_ = c.conn.WriteMessage(context.Background(), b)
}

func (c *wsClient) channel(id string) chan map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.subs[id]
	if !ok {
		ch = make(chan map[string]any, 1<<17)
		c.subs[id] = ch
	}
	return ch
}

// Raw sends one frame and returns the reply frame's bytes (for ids).
func (c *wsClient) Call(ctx context.Context, method string, params any, result any) *errcode.Error {
	id := strconv.FormatInt(c.nextID.Add(1), 10)
	ch := make(chan frame, 1)
	c.mu.Lock()
	c.waiting[id] = ch
	c.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": method, "params": params})
	if err := c.conn.WriteMessage(ctx, b); err != nil {
		return errcode.New(errcode.Internal, "write: %v", err)
	}
	select {
	case f := <-ch:
		if f.Error != nil {
			return f.Error
		}
		if result != nil {
			if err := json.Unmarshal(f.Result, result); err != nil {
				return errcode.New(errcode.Internal, "decode result: %v", err)
			}
		}
		return nil
	case <-ctx.Done():
		return errcode.New(errcode.Internal, "%v", ctx.Err())
	}
}

func (c *wsClient) Events(id string) <-chan map[string]any { return c.channel(id) }

func (c *wsClient) Close() { c.conn.Close() }

// forget drops the events c received and nobody read, and the channels
// that held them (a test measuring the daemon's heap in this process).
func (c *wsClient) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.subs)
}
