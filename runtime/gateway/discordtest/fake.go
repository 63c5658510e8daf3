package discordtest

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

// Fake is a local Discord: the REST API (v10) under /api/v10 and a
// Gateway WebSocket speaking the real opcodes (Hello, Heartbeat/ACK,
// Identify → READY, Resume → replay + RESUMED, Reconnect, Invalid
// Session). Its dispatches are numbered in one log per gateway session;
// a Resume replays the ones after the seq it carries, as Discord does.
type Fake struct {
	t        testing.TB
	Token    string
	Interval int // heartbeat_interval, ms
	srv      *httptest.Server

	Mu        sync.Mutex
	Session   string        // the gateway session's id ("" before the first Identify)
	Seq       int64         // its last sequence number
	log       []dispatchRec // its dispatches
	Conn      *ws.Conn      // the live connection, once READY or RESUMED
	Sessions  int           // sessions begun (Identify)
	Identify  []map[string]any
	Resumes   []Resume
	Beats     int
	NoAck     bool // do not acknowledge heartbeats until the next Resume
	Sloppy    bool // replay the whole log on Resume (not only after its seq)
	nextID    uint64
	Posts     []Post
	Edits     []Post
	Callbacks []Callback
	Limit     []Limit     // answers for the next POSTs of messages
	Attempts  []time.Time // every POST of a message, 429s included
	BadAuth   int
	changed   chan struct{} // closed and replaced on every change
}

type dispatchRec struct {
	s    int64
	t    string
	d    any
	sent bool
}

type Resume struct {
	Path, SessionID string
	Seq             int64
}

type Post struct {
	Channel, ID, Content, ReplyTo string
	CustomIDs                     []string
	At                            time.Time
}

type Callback struct {
	ID, Token string
	Body      map[string]any
}

// Limit is a 429 answer: retry_after seconds, global or not.
type Limit struct {
	RetryAfter float64
	Global     bool
}

const BotID = "900000000000000001"

func New(t testing.TB, token string) *Fake {
	f := &Fake{t: t, Token: token, Interval: 250, nextID: 1000000000000000000, changed: make(chan struct{})}
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
		f.Update(func() { f.Callbacks = append(f.Callbacks, Callback{r.PathValue("id"), r.PathValue("token"), body}) })
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /gw", f.gateway)
	mux.HandleFunc("GET /resume", f.gateway)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// API is the REST base URL.
func (f *Fake) API() string { return f.srv.URL + "/api/v10" }

func (f *Fake) authed(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Authorization") != "Bot "+f.Token {
		f.Update(func() { f.BadAuth++ })
		writeJSON(w, 401, map[string]any{"message": "401: Unauthorized", "code": 0})
		return false
	}
	return true
}

// update changes the state under the lock and wakes the waiters.
func (f *Fake) Update(fn func()) {
	f.Mu.Lock()
	fn()
	close(f.changed)
	f.changed = make(chan struct{})
	f.Mu.Unlock()
}

// waitFor waits until cond (run under the lock) holds.
func (f *Fake) WaitFor(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		f.Mu.Lock()
		ok, ch := cond(), f.changed
		f.Mu.Unlock()
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

func (f *Fake) postMessage(w http.ResponseWriter, r *http.Request) {
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
	var lim *Limit
	var id string
	f.Update(func() {
		f.Attempts = append(f.Attempts, time.Now())
		if len(f.Limit) > 0 {
			lim = &f.Limit[0]
			f.Limit = f.Limit[1:]
			return
		}
		f.nextID++
		id = strconv.FormatUint(f.nextID, 10)
		p := Post{Channel: r.PathValue("channel"), ID: id, Content: body.Content, At: time.Now()}
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
		f.Posts = append(f.Posts, p)
	})
	if lim != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(lim.RetryAfter+0.999)))
		if lim.Global {
			w.Header().Set("X-RateLimit-Global", "true")
			w.Header().Set("X-RateLimit-Scope", "global")
		} else {
			w.Header().Set("X-RateLimit-Scope", "user")
			w.Header().Set("X-RateLimit-Bucket", "msgbucket")
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset-After", fmt.Sprint(lim.RetryAfter))
		}
		writeJSON(w, 429, map[string]any{"message": "You are being rate limited.", "retry_after": lim.RetryAfter, "global": lim.Global})
		return
	}
	w.Header().Set("X-RateLimit-Bucket", "msgbucket")
	w.Header().Set("X-RateLimit-Limit", "5")
	w.Header().Set("X-RateLimit-Remaining", "4")
	w.Header().Set("X-RateLimit-Reset-After", "5.000")
	writeJSON(w, 200, map[string]any{"id": id, "channel_id": r.PathValue("channel"), "content": body.Content})
}

func (f *Fake) editMessage(w http.ResponseWriter, r *http.Request) {
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
	f.Update(func() {
		for _, p := range f.Posts {
			known = known || p.ID == mid
		}
		if known {
			f.Edits = append(f.Edits, Post{Channel: r.PathValue("channel"), ID: mid, Content: body.Content, At: time.Now()})
		}
	})
	if !known {
		writeJSON(w, 404, map[string]any{"message": "Unknown Message", "code": 10008})
		return
	}
	writeJSON(w, 200, map[string]any{"id": mid, "content": body.Content})
}

// gateway serves one Gateway connection.
func (f *Fake) gateway(w http.ResponseWriter, r *http.Request) {
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
	if send(map[string]any{"op": 10, "d": map[string]any{"heartbeat_interval": f.Interval}, "s": nil, "t": nil}) != nil {
		return
	}
	for {
		raw, err := c.ReadMessage(ctx)
		if err != nil {
			f.Update(func() {
				if f.Conn == c {
					f.Conn = nil
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
			f.Update(func() { f.Beats++; ack = !f.NoAck })
			if ack {
				_ = send(map[string]any{"op": 11})
			}
		case 2:
			var d map[string]any
			_ = json.Unmarshal(p.D, &d)
			if d["token"] != f.Token {
				_ = c.CloseWithReason("Authentication failed.")
				return
			}
			f.Mu.Lock()
			f.Identify = append(f.Identify, d)
			f.Sessions++
			f.Session = fmt.Sprintf("fake-session-%d", f.Sessions)
			f.Seq, f.log = 0, nil
			f.Mu.Unlock()
			f.dispatchTo(c, "READY", map[string]any{"v": 10, "session_id": f.Session,
				"resume_gateway_url": "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/resume",
				"user":               map[string]any{"id": BotID, "username": "trellis-bot", "bot": true}})
		case 6:
			var d struct {
				Token     string `json:"token"`
				SessionID string `json:"session_id"`
				Seq       int64  `json:"seq"`
			}
			_ = json.Unmarshal(p.D, &d)
			f.Mu.Lock()
			f.Resumes = append(f.Resumes, Resume{Path: r.URL.Path, SessionID: d.SessionID, Seq: d.Seq})
			ok := d.Token == f.Token && d.SessionID == f.Session && f.Session != ""
			f.NoAck = false
			f.Mu.Unlock()
			if !ok {
				_ = send(map[string]any{"op": 9, "d": false})
				continue
			}
			f.Update(func() {
				for i := range f.log {
					if f.log[i].s > d.Seq || f.Sloppy {
						_ = send(map[string]any{"op": 0, "s": f.log[i].s, "t": f.log[i].t, "d": f.log[i].d})
						f.log[i].sent = true
					}
				}
				f.Seq++
				_ = send(map[string]any{"op": 0, "s": f.Seq, "t": "RESUMED", "d": map[string]any{}})
				f.Conn = c
			})
		}
	}
}

// dispatchTo numbers a dispatch and sends it on c, making c the live
// connection (READY).
func (f *Fake) dispatchTo(c *ws.Conn, t string, d any) {
	f.Update(func() {
		f.Seq++
		f.log = append(f.log, dispatchRec{s: f.Seq, t: t, d: d, sent: true})
		raw, _ := json.Marshal(map[string]any{"op": 0, "s": f.Seq, "t": t, "d": d})
		_ = c.WriteMessage(context.Background(), raw)
		f.Conn = c
	})
}

// dispatch numbers a dispatch of the session and sends it when a
// connection is live; otherwise a Resume replays it.
func (f *Fake) Dispatch(t string, d any) {
	f.Update(func() {
		f.Seq++
		disp := dispatchRec{s: f.Seq, t: t, d: d}
		if f.Conn != nil {
			raw, _ := json.Marshal(map[string]any{"op": 0, "s": f.Seq, "t": t, "d": d})
			disp.sent = f.Conn.WriteMessage(context.Background(), raw) == nil
		}
		f.log = append(f.log, disp)
	})
}

// message dispatches a MESSAGE_CREATE and returns its id.
func (f *Fake) Message(channel, userID, content string, bot bool) string {
	f.Mu.Lock()
	f.nextID++
	id := strconv.FormatUint(f.nextID, 10)
	f.Mu.Unlock()
	f.Dispatch("MESSAGE_CREATE", map[string]any{"id": id, "channel_id": channel, "guild_id": "700000000000000001",
		"content": content, "type": 0, "author": map[string]any{"id": userID, "username": "user" + userID, "bot": bot}})
	return id
}

// click dispatches an INTERACTION_CREATE of a button.
func (f *Fake) Click(channel, messageID, customID, userID string) (id, token string) {
	f.Mu.Lock()
	f.nextID++
	id = strconv.FormatUint(f.nextID, 10)
	f.Mu.Unlock()
	token = "interaction-token-" + id
	f.Dispatch("INTERACTION_CREATE", map[string]any{"id": id, "token": token, "type": 3, "application_id": "800000000000000001",
		"channel_id": channel, "guild_id": "700000000000000001", "version": 1,
		"data":    map[string]any{"custom_id": customID, "component_type": 2},
		"member":  map[string]any{"user": map[string]any{"id": userID, "username": "user" + userID}},
		"message": map[string]any{"id": messageID}})
	return id, token
}

// live waits until a connection is READY or RESUMED.
func (f *Fake) Live() {
	f.t.Helper()
	f.WaitFor("a live gateway connection", func() bool { return f.Conn != nil })
}

// drop ends the live connection as the server, with the given op first
// (7 Reconnect, 9 Invalid Session; 0: the TCP connection just ends).
func (f *Fake) Drop(op int, resumable bool) {
	f.Mu.Lock()
	c := f.Conn
	f.Conn = nil
	f.Mu.Unlock()
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
func (f *Fake) RepliesTo(mid string) []Post {
	var out []Post
	for _, p := range f.Posts {
		if p.ReplyTo == mid {
			out = append(out, p)
		}
	}
	return out
}

// lastContent is what message mid shows now (after its edits).
func (f *Fake) LastContent(mid string) string {
	text := ""
	for _, p := range f.Posts {
		if p.ID == mid {
			text = p.Content
		}
	}
	for _, e := range f.Edits {
		if e.ID == mid {
			text = e.Content
		}
	}
	return text
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
