package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellis-run/trellis/facade/rpcerr"
	"github.com/trellis-run/trellis/facade/ws"
	"github.com/trellis-run/trellis/version"
)

// wsClient is a lean JSON-RPC client of the facade: it reads every frame,
// routes replies by id and hands session.event params to onEvent with the
// time they arrived. It decodes no more of an event than its envelope, so
// that the bench measures the daemon rather than the client.
type wsClient struct {
	conn    *ws.Conn
	onEvent func(ev eventRef, at time.Time)
	nextID  atomic.Int64

	mu      sync.Mutex
	waiting map[int64]chan wsReply
	done    chan struct{}
	err     error
}

type wsReply struct {
	Result json.RawMessage `json:"result"`
	Error  *rpcerr.Error   `json:"error"`
}

// eventRef is the envelope of one session event.
type eventRef struct {
	SessionID string
	Seq       int64
	Kind      string
	TS        string
	raw       []byte
}

// dialWS connects and completes system.hello. onEvent may be nil; it is
// called from the client's read goroutine.
func (h *daemonHandle) dialWS(ctx context.Context, onEvent func(eventRef, time.Time)) (*wsClient, error) {
	// No read limit to speak of: a resumed session can be a large frame.
	conn, err := ws.Dial(ctx, h.wsURL(), ws.Options{ReadLimit: 1 << 30})
	if err != nil {
		return nil, err
	}
	c := &wsClient{conn: conn, onEvent: onEvent, waiting: map[int64]chan wsReply{}, done: make(chan struct{})}
	go c.readLoop()
	err = c.call(ctx, "system.hello", map[string]any{
		"token": h.token, "clientVersion": version.Server, "protocolVersion": version.Protocol, "clientKind": "bench",
	}, nil)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("bench: system.hello: %w", err)
	}
	return c, nil
}

var eventPrefix = []byte(`{"jsonrpc":"2.0","method":"session.event","params":`)

func (c *wsClient) readLoop() {
	defer close(c.done)
	for {
		data, err := c.conn.ReadMessage(context.Background())
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
		at := time.Now()
		if bytes.HasPrefix(data, eventPrefix) {
			if c.onEvent != nil {
				if ev, ok := scanEvent(data[len(eventPrefix) : len(data)-1]); ok {
					c.onEvent(ev, at)
				}
			}
			continue
		}
		id, reply, ok := scanReply(data)
		if !ok {
			continue // other notifications; the bench makes no approvals
		}
		c.mu.Lock()
		ch := c.waiting[id]
		delete(c.waiting, id)
		c.mu.Unlock()
		if ch != nil {
			ch <- reply
		}
	}
}

// call sends one request and decodes its result into result (may be nil).
func (c *wsClient) call(ctx context.Context, method string, params, result any) error {
	raw, err := c.callRaw(ctx, method, params)
	if err != nil || result == nil {
		return err
	}
	return json.Unmarshal(raw, result)
}

// callRaw sends one request and returns its raw result.
func (c *wsClient) callRaw(ctx context.Context, method string, params any) (json.RawMessage, error) {
	id := c.nextID.Add(1)
	ch := make(chan wsReply, 1)
	c.mu.Lock()
	c.waiting[id] = ch
	c.mu.Unlock()
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	if err := c.conn.WriteMessage(ctx, b); err != nil {
		return nil, fmt.Errorf("bench: %s: %w", method, err)
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			return nil, fmt.Errorf("bench: %s: %w", method, r.Error)
		}
		return r.Result, nil
	case <-c.done:
		return nil, fmt.Errorf("bench: %s: connection closed: %v", method, c.err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *wsClient) close() { c.conn.Close() }

var replyPrefix = []byte(`{"jsonrpc":"2.0","id":`)

// scanReply reads a reply to one of our requests (numeric ids). The facade
// writes {"jsonrpc":"2.0","id":N,"result":…} (or "error"), so the result
// is sliced out without decoding it: a large result (session.resume) is
// then decoded once, by the caller.
func scanReply(data []byte) (int64, wsReply, bool) {
	if rest, ok := bytes.CutPrefix(data, replyPrefix); ok {
		k := 0
		for k < len(rest) && rest[k] >= '0' && rest[k] <= '9' {
			k++
		}
		if id, err := strconv.ParseInt(string(rest[:k]), 10, 64); err == nil {
			if result, ok := bytes.CutPrefix(rest[k:], []byte(`,"result":`)); ok && bytes.HasSuffix(result, []byte("}")) {
				return id, wsReply{Result: result[:len(result)-1]}, true
			}
		}
	}
	var f struct {
		ID     *int64          `json:"id"`
		Method string          `json:"method"`
		Result json.RawMessage `json:"result"`
		Error  *rpcerr.Error   `json:"error"`
	}
	if json.Unmarshal(data, &f) != nil || f.Method != "" || f.ID == nil {
		return 0, wsReply{}, false
	}
	return *f.ID, wsReply{Result: f.Result, Error: f.Error}, true
}

// scanEvent reads the envelope of a session event object without decoding
// its payload. The facade writes sessionId, seq and kind before the payload
// and ts after it; anything else falls back to encoding/json.
func scanEvent(obj []byte) (eventRef, bool) {
	ev := eventRef{raw: obj}
	var ok1, ok2, ok3, ok4 bool
	ev.SessionID, ok1 = stringField(obj, `"sessionId":"`, false)
	ev.Kind, ok2 = stringField(obj, `"kind":"`, false)
	ev.TS, ok3 = stringField(obj, `"ts":"`, true)
	if i := bytes.Index(obj, []byte(`"seq":`)); i >= 0 {
		j := i + len(`"seq":`)
		k := j
		for k < len(obj) && obj[k] >= '0' && obj[k] <= '9' {
			k++
		}
		n, err := strconv.ParseInt(string(obj[j:k]), 10, 64)
		ev.Seq, ok4 = n, err == nil
	}
	if ok1 && ok2 && ok3 && ok4 {
		return ev, true
	}
	var full struct {
		SessionID string `json:"sessionId"`
		Seq       int64  `json:"seq"`
		Kind      string `json:"kind"`
		TS        string `json:"ts"`
	}
	if json.Unmarshal(obj, &full) != nil || full.Seq == 0 {
		return ev, false
	}
	return eventRef{SessionID: full.SessionID, Seq: full.Seq, Kind: full.Kind, TS: full.TS, raw: obj}, true
}

// stringField returns the string after the first (or last) occurrence of
// key, up to the next quote; the values it reads hold no escapes.
func stringField(obj []byte, key string, last bool) (string, bool) {
	var i int
	if last {
		i = bytes.LastIndex(obj, []byte(key))
	} else {
		i = bytes.Index(obj, []byte(key))
	}
	if i < 0 {
		return "", false
	}
	rest := obj[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return "", false
	}
	return string(rest[:j]), true
}
