package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/ws"
)

// fakeDiscord is a local Discord: the REST API (v10) under /api/v10 and a
// Gateway WebSocket speaking the real opcodes (Hello, Heartbeat/ACK,
// Identify → READY, Resume → replay + RESUMED, Reconnect, Invalid
// Session). Its dispatches are numbered in one log per gateway session;
// a Resume replays the ones after the seq it carries, as Discord does.
type fakeDiscord struct {
	t        *testing.T
	token    string
	interval int // heartbeat_interval, ms
	srv      *httptest.Server

	mu        sync.Mutex
	session   string     // the gateway session's id ("" before the first Identify)
	seq       int64      // its last sequence number
	log       []fakeDisp // its dispatches
	conn      *ws.Conn   // the live connection, once READY or RESUMED
	sessions  int        // sessions begun (Identify)
	identify  []map[string]any
	resumes   []fakeResume
	beats     int
	noAck     bool // do not acknowledge heartbeats until the next Resume
	sloppy    bool // replay the whole log on Resume (not only after its seq)
	nextID    uint64
	posts     []fakePost
	edits     []fakePost
	callbacks []fakeCallback
	limit     []fakeLimit // answers for the next POSTs of messages
	attempts  []time.Time // every POST of a message, 429s included
	badAuth   int
	changed   chan struct{} // closed and replaced on every change
}

type fakeDisp struct {
	s    int64
	t    string
	d    any
	sent bool
}

type fakeResume struct {
	Path, SessionID string
	Seq             int64
}

type fakePost struct {
	Channel, ID, Content, ReplyTo string
	CustomIDs                     []string
	At                            time.Time
}

type fakeCallback struct {
	ID, Token string
	Body      map[string]any
}

// fakeLimit is a 429 answer: retry_after seconds, global or not.
type fakeLimit struct {
	retryAfter float64
	global     bool
}

const fakeBotID = "900000000000000001"

func newFakeDiscord(t *testing.T, token string) *fakeDiscord {
	f := &fakeDiscord{t: t, token: token, interval: 250, nextID: 1000000000000000000, changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v10/gateway/bot", func(w http.ResponseWriter, r *http.Request) {
		if !f.authed(w, r) {
			return
		}
		writeJSON(w, 200, map[string]any{"url": "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/gw", "shards": 1,
			"session_start_limit": map[string]any{"total": 1000, "remaining": 999, "reset_after": 14400000, "max_concurrency": 1}})
	})
	mux.HandleFunc("POST /api/v10/channels/{channel}/messages", f.postMessage)
	mux.HandleFunc("PATCH /api/v10/channels/{channel}/messages/{message}", f.editMessage)
	mux.HandleFunc("POST /api/v10/interactions/{id}/{token}/callback", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.update(func() { f.callbacks = append(f.callbacks, fakeCallback{r.PathValue("id"), r.PathValue("token"), body}) })
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /gw", f.gateway)
	mux.HandleFunc("GET /resume", f.gateway)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// API is the REST base URL.
func (f *fakeDiscord) API() string { return f.srv.URL + "/api/v10" }

func (f *fakeDiscord) authed(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Authorization") != "Bot "+f.token {
		f.update(func() { f.badAuth++ })
		writeJSON(w, 401, map[string]any{"message": "401: Unauthorized", "code": 0})
		return false
	}
	return true
}

// update changes the state under the lock and wakes the waiters.
func (f *fakeDiscord) update(fn func()) {
	f.mu.Lock()
	fn()
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

// waitFor waits until cond (run under the lock) holds.
func (f *fakeDiscord) waitFor(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		f.mu.Lock()
		ok, ch := cond(), f.changed
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			f.t.Fatalf("fake discord: %s: not within 20 s", what)
		}
	}
}

func (f *fakeDiscord) postMessage(w http.ResponseWriter, r *http.Request) {
	if !f.authed(w, r) {
		return
	}
	var body struct {
		Content          string `json:"content"`
		MessageReference *struct {
			MessageID string `json:"message_id"`
		} `json:"message_reference"`
		Components []struct {
			Type       int `json:"type"`
			Components []struct {
				Type     int    `json:"type"`
				CustomID string `json:"custom_id"`
			} `json:"components"`
		} `json:"components"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Content == "" || len([]rune(body.Content)) > 2000 {
		writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
		return
	}
	var lim *fakeLimit
	var id string
	f.update(func() {
		f.attempts = append(f.attempts, time.Now())
		if len(f.limit) > 0 {
			lim = &f.limit[0]
			f.limit = f.limit[1:]
			return
		}
		f.nextID++
		id = strconv.FormatUint(f.nextID, 10)
		p := fakePost{Channel: r.PathValue("channel"), ID: id, Content: body.Content, At: time.Now()}
		if body.MessageReference != nil {
			p.ReplyTo = body.MessageReference.MessageID
		}
		for _, row := range body.Components {
			for _, c := range row.Components {
				if row.Type == 1 && c.Type == 2 {
					p.CustomIDs = append(p.CustomIDs, c.CustomID)
				}
			}
		}
		f.posts = append(f.posts, p)
	})
	if lim != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(lim.retryAfter+0.999)))
		if lim.global {
			w.Header().Set("X-RateLimit-Global", "true")
			w.Header().Set("X-RateLimit-Scope", "global")
		} else {
			w.Header().Set("X-RateLimit-Scope", "user")
			w.Header().Set("X-RateLimit-Bucket", "msgbucket")
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset-After", fmt.Sprint(lim.retryAfter))
		}
		writeJSON(w, 429, map[string]any{"message": "You are being rate limited.", "retry_after": lim.retryAfter, "global": lim.global})
		return
	}
	w.Header().Set("X-RateLimit-Bucket", "msgbucket")
	w.Header().Set("X-RateLimit-Limit", "5")
	w.Header().Set("X-RateLimit-Remaining", "4")
	w.Header().Set("X-RateLimit-Reset-After", "5.000")
	writeJSON(w, 200, map[string]any{"id": id, "channel_id": r.PathValue("channel"), "content": body.Content})
}

func (f *fakeDiscord) editMessage(w http.ResponseWriter, r *http.Request) {
	if !f.authed(w, r) {
		return
	}
	var body struct {
		Content string `json:"content"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len([]rune(body.Content)) > 2000 {
		writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
		return
	}
	mid := r.PathValue("message")
	known := false
	f.update(func() {
		for _, p := range f.posts {
			known = known || p.ID == mid
		}
		if known {
			f.edits = append(f.edits, fakePost{Channel: r.PathValue("channel"), ID: mid, Content: body.Content, At: time.Now()})
		}
	})
	if !known {
		writeJSON(w, 404, map[string]any{"message": "Unknown Message", "code": 10008})
		return
	}
	writeJSON(w, 200, map[string]any{"id": mid, "content": body.Content})
}

// gateway serves one Gateway connection.
func (f *fakeDiscord) gateway(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("v") != "10" || r.URL.Query().Get("encoding") != "json" {
		http.Error(w, "want ?v=10&encoding=json", 400)
		return
	}
	c, err := ws.Accept(w, r, ws.Options{PingInterval: -1})
	if err != nil {
		return
	}
	defer c.Close()
	ctx := r.Context()
	send := func(v any) error {
		raw, _ := json.Marshal(v)
		return c.WriteMessage(ctx, raw)
	}
	if send(map[string]any{"op": 10, "d": map[string]any{"heartbeat_interval": f.interval}, "s": nil, "t": nil}) != nil {
		return
	}
	for {
		raw, err := c.ReadMessage(ctx)
		if err != nil {
			f.update(func() {
				if f.conn == c {
					f.conn = nil
				}
			})
			return
		}
		var p struct {
			Op int             `json:"op"`
			D  json.RawMessage `json:"d"`
		}
		if json.Unmarshal(raw, &p) != nil {
			_ = c.CloseWithReason("decode error")
			return
		}
		switch p.Op {
		case 1:
			var ack bool
			f.update(func() { f.beats++; ack = !f.noAck })
			if ack {
				_ = send(map[string]any{"op": 11})
			}
		case 2:
			var d map[string]any
			_ = json.Unmarshal(p.D, &d)
			if d["token"] != f.token {
				_ = c.CloseWithReason("Authentication failed.")
				return
			}
			f.mu.Lock()
			f.identify = append(f.identify, d)
			f.sessions++
			f.session = fmt.Sprintf("fake-session-%d", f.sessions)
			f.seq, f.log = 0, nil
			f.mu.Unlock()
			f.dispatchTo(c, "READY", map[string]any{"v": 10, "session_id": f.session,
				"resume_gateway_url": "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/resume",
				"user":               map[string]any{"id": fakeBotID, "username": "trellis-bot", "bot": true}})
		case 6:
			var d struct {
				Token     string `json:"token"`
				SessionID string `json:"session_id"`
				Seq       int64  `json:"seq"`
			}
			_ = json.Unmarshal(p.D, &d)
			f.mu.Lock()
			f.resumes = append(f.resumes, fakeResume{Path: r.URL.Path, SessionID: d.SessionID, Seq: d.Seq})
			ok := d.Token == f.token && d.SessionID == f.session && f.session != ""
			f.noAck = false
			f.mu.Unlock()
			if !ok {
				_ = send(map[string]any{"op": 9, "d": false})
				continue
			}
			f.update(func() {
				for i := range f.log {
					if f.log[i].s > d.Seq || f.sloppy {
						_ = send(map[string]any{"op": 0, "s": f.log[i].s, "t": f.log[i].t, "d": f.log[i].d})
						f.log[i].sent = true
					}
				}
				f.seq++
				_ = send(map[string]any{"op": 0, "s": f.seq, "t": "RESUMED", "d": map[string]any{}})
				f.conn = c
			})
		}
	}
}

// dispatchTo numbers a dispatch and sends it on c, making c the live
// connection (READY).
func (f *fakeDiscord) dispatchTo(c *ws.Conn, t string, d any) {
	f.update(func() {
		f.seq++
		f.log = append(f.log, fakeDisp{s: f.seq, t: t, d: d, sent: true})
		raw, _ := json.Marshal(map[string]any{"op": 0, "s": f.seq, "t": t, "d": d})
		_ = c.WriteMessage(context.Background(), raw)
		f.conn = c
	})
}

// dispatch numbers a dispatch of the session and sends it when a
// connection is live; otherwise a Resume replays it.
func (f *fakeDiscord) dispatch(t string, d any) {
	f.update(func() {
		f.seq++
		disp := fakeDisp{s: f.seq, t: t, d: d}
		if f.conn != nil {
			raw, _ := json.Marshal(map[string]any{"op": 0, "s": f.seq, "t": t, "d": d})
			disp.sent = f.conn.WriteMessage(context.Background(), raw) == nil
		}
		f.log = append(f.log, disp)
	})
}

// message dispatches a MESSAGE_CREATE and returns its id.
func (f *fakeDiscord) message(channel, userID, content string, bot bool) string {
	f.mu.Lock()
	f.nextID++
	id := strconv.FormatUint(f.nextID, 10)
	f.mu.Unlock()
	f.dispatch("MESSAGE_CREATE", map[string]any{"id": id, "channel_id": channel, "guild_id": "700000000000000001",
		"content": content, "type": 0, "author": map[string]any{"id": userID, "username": "user" + userID, "bot": bot}})
	return id
}

// click dispatches an INTERACTION_CREATE of a button.
func (f *fakeDiscord) click(channel, messageID, customID, userID string) (id, token string) {
	f.mu.Lock()
	f.nextID++
	id = strconv.FormatUint(f.nextID, 10)
	f.mu.Unlock()
	token = "interaction-token-" + id
	f.dispatch("INTERACTION_CREATE", map[string]any{"id": id, "token": token, "type": 3, "application_id": "800000000000000001",
		"channel_id": channel, "guild_id": "700000000000000001", "version": 1,
		"data":    map[string]any{"custom_id": customID, "component_type": 2},
		"member":  map[string]any{"user": map[string]any{"id": userID, "username": "user" + userID}},
		"message": map[string]any{"id": messageID}})
	return id, token
}

// live waits until a connection is READY or RESUMED.
func (f *fakeDiscord) live() {
	f.t.Helper()
	f.waitFor("a live gateway connection", func() bool { return f.conn != nil })
}

// drop ends the live connection as the server, with the given op first
// (7 Reconnect, 9 Invalid Session; 0: the TCP connection just ends).
func (f *fakeDiscord) drop(op int, resumable bool) {
	f.mu.Lock()
	c := f.conn
	f.conn = nil
	f.mu.Unlock()
	if c == nil {
		f.t.Fatal("fake discord: no live connection to drop")
	}
	switch op {
	case 7:
		_ = c.WriteMessage(context.Background(), []byte(`{"op":7,"d":null}`))
	case 9:
		_ = c.WriteMessage(context.Background(), []byte(fmt.Sprintf(`{"op":9,"d":%t}`, resumable)))
	default:
		_ = c.CloseWithReason("dropped")
	}
}

// repliesTo returns the posts replying to a message.
func (f *fakeDiscord) repliesTo(mid string) []fakePost {
	var out []fakePost
	for _, p := range f.posts {
		if p.ReplyTo == mid {
			out = append(out, p)
		}
	}
	return out
}

// lastContent is what message mid shows now (after its edits).
func (f *fakeDiscord) lastContent(mid string) string {
	text := ""
	for _, p := range f.posts {
		if p.ID == mid {
			text = p.Content
		}
	}
	for _, e := range f.edits {
		if e.ID == mid {
			text = e.Content
		}
	}
	return text
}
