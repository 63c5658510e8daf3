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
	"unsafe"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/ws"
	"github.com/trellis-run/trellis/version"
)

// wsClient is a lean JSON-RPC client of the facade: it reads every frame,
// routes replies by id and hands session.event params to onEvent with the
// time they arrived. It decodes no more of an event than its envelope, so
// that the bench measures the daemon rather than the client.
//
// It speaks WebSocket through protocol/ws, as every Trellis client does,
// reading every frame into one reused buffer: the client shares the
// machine's cores with the daemon it measures (BenchmarkWSClientEvents).
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
	Error  *errcode.Error  `json:"error"`
}

// eventRef is the envelope of one session event. raw (the event's JSON
// object) is valid only until onEvent returns: the client reads the next
// frame into the same buffer.
type eventRef struct {
	SessionID string
	Seq       int64
	Kind      string
	TS        string
	raw       []byte
}

// dialWSConn opens a client connection to url. A client that reads events
// gets a 64 KiB read buffer that takes a stream of them in few system
// calls (not the others: the conns bench holds 10,000 idle connections).
// There is no read limit to speak of: a resume answer can be a large frame.
func dialWSConn(ctx context.Context, url string, events bool) (*ws.Conn, error) {
	opts := ws.Options{ReadLimit: 1 << 30}
	if events {
		opts.ReadBufferSize = 64 << 10
	}
	conn, err := ws.Dial(ctx, url, opts)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return conn, nil
}

// dialWS connects and completes system.hello. onEvent may be nil; it is
// called from the client's read goroutine.
func (h *daemonHandle) dialWS(ctx context.Context, onEvent func(eventRef, time.Time)) (*wsClient, error) {
	conn, err := dialWSConn(ctx, h.wsURL(), onEvent != nil)
	if err != nil {
		return nil, err
	}
	c := newWSClient(conn, onEvent)
	err = c.call(ctx, "system.hello", map[string]any{
		"token": h.token, "clientVersion": version.Server, "protocolVersion": version.Protocol, "clientKind": "bench",
	}, nil)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("bench: system.hello: %w", err)
	}
	return c, nil
}

// newWSClient starts reading conn.
func newWSClient(conn *ws.Conn, onEvent func(eventRef, time.Time)) *wsClient {
	c := &wsClient{conn: conn, onEvent: onEvent, waiting: map[int64]chan wsReply{}, done: make(chan struct{})}
	go c.readLoop()
	return c
}

var eventPrefix = []byte(`{"jsonrpc":"2.0","method":"session.event","params":`)

func (c *wsClient) readLoop() {
	defer close(c.done)
	// One buffer serves every event frame (an event is handed to onEvent
	// and done with when it returns); a reply's frame is handed over to
	// its caller, and the next frame gets a new buffer.
	var buf []byte
	var env envelope
	for {
		data, err := c.conn.ReadMessageInto(context.Background(), buf)
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
		at := time.Now()
		buf = data
		if len(data) > len(eventPrefix) && bytes.HasPrefix(data, eventPrefix) {
			if c.onEvent != nil {
				if ev, ok := env.scan(data[len(eventPrefix) : len(data)-1]); ok {
					c.onEvent(ev, at)
				}
			}
			continue
		}
		id, reply, ok := scanReply(data)
		if !ok {
			continue // other notifications; the bench makes no approvals
		}
		buf = nil
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

// close says goodbye (a normal closure) and closes the connection.
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
		Error  *errcode.Error  `json:"error"`
	}
	if json.Unmarshal(data, &f) != nil || f.Method != "" || f.ID == nil {
		return 0, wsReply{}, false
	}
	return *f.ID, wsReply{Result: f.Result, Error: f.Error}, true
}

// envelope reads the envelopes of one connection's session events
// without allocating for each: a session id or kind equal to the previous
// event's is that event's string, and timestamps are carved from a shared
// chunk.
type envelope struct {
	sessionID, kind string
	chunk           []byte // ts strings; each byte written once, before the string over it exists
}

// scan reads the envelope of a session event object. The facade writes
// {"sessionId":"…","seq":N,"kind":"…","payload":…,"ts":"…"} (with
// ,"unstored":true after ts when set), read in place; anything else goes
// to scanEvent.
func (e *envelope) scan(obj []byte) (eventRef, bool) {
	sid, seq, kind, ts, ok := facadeEnvelope(obj)
	if !ok {
		return scanEvent(obj)
	}
	if string(sid) != e.sessionID {
		e.sessionID = string(sid)
	}
	if string(kind) != e.kind {
		e.kind = string(kind)
	}
	return eventRef{SessionID: e.sessionID, Seq: seq, Kind: e.kind, TS: e.carve(ts), raw: obj}, true
}

// carve returns b as a string whose bytes live in e.chunk: many short
// strings share one allocation. A chunk's bytes are never written again
// once a string covers them, so the strings are immutable like any other.
func (e *envelope) carve(b []byte) string {
	const chunkSize = 16 << 10
	if len(b) == 0 || len(b) > chunkSize/16 {
		return string(b)
	}
	if cap(e.chunk)-len(e.chunk) < len(b) {
		e.chunk = make([]byte, 0, chunkSize)
	}
	at := len(e.chunk)
	e.chunk = append(e.chunk, b...)
	return unsafe.String(&e.chunk[at], len(b))
}

var (
	sessionIDKey = []byte(`{"sessionId":"`)
	seqKey       = []byte(`","seq":`)
	kindKey      = []byte(`,"kind":"`)
	payloadKey   = []byte(`","payload":`)
	tsKey        = []byte(`,"ts":"`)
	unstoredTail = []byte(`,"unstored":true`)
)

// facadeEnvelope reads an event object laid out as the facade writes it
// (codec.AppendStoredEvent): sessionId, seq and kind first, in that order,
// then the payload, then ts last (before "unstored"). The strings it reads
// hold no escapes (ids, kinds and timestamps).
func facadeEnvelope(obj []byte) (sid []byte, seq int64, kind, ts []byte, ok bool) {
	rest, ok := bytes.CutPrefix(obj, sessionIDKey)
	if !ok {
		return
	}
	i := bytes.IndexByte(rest, '"')
	if i < 0 {
		return nil, 0, nil, nil, false
	}
	sid = rest[:i]
	if rest, ok = bytes.CutPrefix(rest[i:], seqKey); !ok {
		return
	}
	k := 0
	for k < len(rest) && k < 18 && rest[k] >= '0' && rest[k] <= '9' {
		seq = seq*10 + int64(rest[k]-'0')
		k++
	}
	if k == 0 {
		return nil, 0, nil, nil, false
	}
	if rest, ok = bytes.CutPrefix(rest[k:], kindKey); !ok {
		return
	}
	if i = bytes.IndexByte(rest, '"'); i < 0 {
		return nil, 0, nil, nil, false
	}
	kind = rest[:i]
	if rest, ok = bytes.CutPrefix(rest[i:], payloadKey); !ok {
		return
	}
	// From the end: "ts":"…"} or "ts":"…","unstored":true}.
	tail, ok := bytes.CutSuffix(rest, []byte("}"))
	if !ok {
		return
	}
	tail, _ = bytes.CutSuffix(tail, unstoredTail)
	if tail, ok = bytes.CutSuffix(tail, []byte(`"`)); !ok {
		return
	}
	i = bytes.LastIndexByte(tail, '"')
	if i < 0 || !bytes.HasSuffix(tail[:i+1], tsKey) {
		return nil, 0, nil, nil, false
	}
	return sid, seq, kind, tail[i+1:], true
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
