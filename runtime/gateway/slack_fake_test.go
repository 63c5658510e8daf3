package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/ws"
)

// fakeSlack speaks the parts of Slack's Web API the gateway calls
// (chat.postMessage, chat.update, apps.connections.open: JSON bodies, a
// bearer token, {ok, error} answers, HTTP 429 with Retry-After) and Socket
// Mode's WebSocket, whose connections the test drives (sockets).
type fakeSlack struct {
	bot, app string
	srv      *httptest.Server

	mu      sync.Mutex
	calls   []slackCall
	nextTS  int
	limited map[string]int // method → how many more calls get HTTP 429
	opens   int            // apps.connections.open calls

	posts   chan slackCall    // every chat.postMessage and chat.update
	sockets chan *fakeSlackWS // every Socket Mode connection
}

// slackCall is one Web API call the fake served.
type slackCall struct {
	Method string
	Body   map[string]any
	TS     string // the message posted or edited
}

func newFakeSlack(t *testing.T, bot, app string) *fakeSlack {
	t.Helper()
	fs := &fakeSlack{bot: bot, app: app, limited: map[string]int{}, posts: make(chan slackCall, 64), sockets: make(chan *fakeSlackWS, 4)}
	fs.srv = httptest.NewServer(fs)
	t.Cleanup(fs.srv.Close)
	return fs
}

// API is the Web API base URL (Options.SlackAPI).
func (fs *fakeSlack) API() string { return fs.srv.URL + "/api" }

func (fs *fakeSlack) answer(w http.ResponseWriter, v map[string]any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(v)
}

func (fs *fakeSlack) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/socket" {
		conn, err := ws.Accept(w, r, ws.Options{PingInterval: -1})
		if err != nil {
			return
		}
		fs.sockets <- &fakeSlackWS{conn: conn, ticket: r.URL.Query().Get("ticket")}
		return
	}
	method, ok := strings.CutPrefix(r.URL.Path, "/api/")
	if !ok || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	want := "Bearer " + fs.bot
	if method == "apps.connections.open" {
		want = "Bearer " + fs.app
	}
	if r.Header.Get("Authorization") != want {
		fs.answer(w, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		fs.answer(w, map[string]any{"ok": false, "error": "invalid_form_data"})
		return
	}
	raw, _ := io.ReadAll(r.Body)
	body := map[string]any{}
	if err := json.Unmarshal(raw, &body); err != nil {
		fs.answer(w, map[string]any{"ok": false, "error": "invalid_json"})
		return
	}
	fs.mu.Lock()
	if fs.limited[method] > 0 {
		fs.limited[method]--
		fs.calls = append(fs.calls, slackCall{Method: method + " (429)", Body: body})
		fs.mu.Unlock()
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusTooManyRequests)
		fs.answer(w, map[string]any{"ok": false, "error": "ratelimited"})
		return
	}
	call := slackCall{Method: method, Body: body}
	var out map[string]any
	switch method {
	case "chat.postMessage":
		if body["channel"] == nil || (body["text"] == nil && body["blocks"] == nil) {
			fs.mu.Unlock()
			fs.answer(w, map[string]any{"ok": false, "error": "no_text"})
			return
		}
		fs.nextTS++
		call.TS = fmt.Sprintf("1800000000.%06d", fs.nextTS)
		out = map[string]any{"ok": true, "channel": body["channel"], "ts": call.TS, "message": map[string]any{"text": body["text"]}}
	case "chat.update":
		ts, _ := body["ts"].(string)
		if ts == "" {
			fs.mu.Unlock()
			fs.answer(w, map[string]any{"ok": false, "error": "message_not_found"})
			return
		}
		call.TS = ts
		out = map[string]any{"ok": true, "channel": body["channel"], "ts": ts, "text": body["text"]}
	case "apps.connections.open":
		fs.opens++
		u := "ws" + strings.TrimPrefix(fs.srv.URL, "http") + "/socket?ticket=" + strconv.Itoa(fs.opens)
		out = map[string]any{"ok": true, "url": u}
	default:
		fs.mu.Unlock()
		fs.answer(w, map[string]any{"ok": false, "error": "unknown_method"})
		return
	}
	fs.calls = append(fs.calls, call)
	fs.mu.Unlock()
	if method == "chat.postMessage" || method == "chat.update" {
		fs.posts <- call
	}
	fs.answer(w, out)
}

// methods lists the calls made so far, by method (429s as "m (429)").
func (fs *fakeSlack) methods() []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []string
	for _, c := range fs.calls {
		out = append(out, c.Method)
	}
	return out
}

// count counts the calls of a method.
func (fs *fakeSlack) count(method string) int {
	n := 0
	for _, m := range fs.methods() {
		if m == method {
			n++
		}
	}
	return n
}

// next returns the next chat.postMessage or chat.update.
func (fs *fakeSlack) next(t *testing.T) slackCall {
	t.Helper()
	select {
	case c := <-fs.posts:
		return c
	case <-time.After(15 * time.Second):
		t.Fatalf("no chat.postMessage or chat.update within 15 s; calls %v", fs.methods())
	}
	return slackCall{}
}

// nextUntil skips posts until one keep accepts.
func (fs *fakeSlack) nextUntil(t *testing.T, keep func(slackCall) bool) slackCall {
	t.Helper()
	for {
		if c := fs.next(t); keep(c) {
			return c
		}
	}
}

// socket returns the next Socket Mode connection the gateway opened.
func (fs *fakeSlack) socket(t *testing.T) *fakeSlackWS {
	t.Helper()
	select {
	case c := <-fs.sockets:
		t.Cleanup(func() { _ = c.conn.Close() })
		return c
	case <-time.After(15 * time.Second):
		t.Fatalf("no Socket Mode connection within 15 s; calls %v", fs.methods())
	}
	return nil
}

// fakeSlackWS is the server side of one Socket Mode connection.
type fakeSlackWS struct {
	conn   *ws.Conn
	ticket string
}

// send sends an envelope.
func (c *fakeSlackWS) send(t *testing.T, env map[string]any) {
	t.Helper()
	raw, _ := json.Marshal(env)
	if err := c.conn.WriteMessage(context.Background(), raw); err != nil {
		t.Fatalf("socket mode: send %s: %v", env["type"], err)
	}
}

// wantAck reads the acknowledgement of envelope id.
func (c *fakeSlackWS) wantAck(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	raw, err := c.conn.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("socket mode: no acknowledgement of %s: %v", id, err)
	}
	var ack map[string]any
	if json.Unmarshal(raw, &ack) != nil || ack["envelope_id"] != id {
		t.Fatalf("socket mode: acknowledgement %s, want envelope_id %s", raw, id)
	}
}

// slackEventBody is an Events API event_callback body of a message event.
func slackEventBody(eventID, typ, channel, user, text, ts, threadTS string) map[string]any {
	ev := map[string]any{"type": typ, "channel": channel, "user": user, "text": text, "ts": ts, "event_ts": ts, "channel_type": "channel"}
	if threadTS != "" {
		ev["thread_ts"] = threadTS
	}
	return map[string]any{
		"token": "verification-token-unused", "team_id": "T0001", "api_app_id": "A0001",
		"type": "event_callback", "event_id": eventID, "event_time": time.Now().Unix(),
		"event": ev,
	}
}

// slackBlockActions is the interactive payload of a button click.
func slackBlockActions(user, channel, actionID, value string) map[string]any {
	return map[string]any{
		"type": "block_actions", "team": map[string]any{"id": "T0001"},
		"user":    map[string]any{"id": user, "username": "ann", "name": "ann", "team_id": "T0001"},
		"channel": map[string]any{"id": channel, "name": "ops"},
		"actions": []any{map[string]any{"type": "button", "action_id": actionID, "block_id": "trellis_approval", "value": value, "action_ts": "1800000001.000001"}},
	}
}

// slackRequest POSTs a signed request to a binding's request URL: body is
// JSON, or with form the interactive payload= form; signedAt is the
// request's timestamp, key the signing secret; headers are added.
func slackRequest(t *testing.T, addr, bindingID, key string, signedAt time.Time, body map[string]any, form bool, headers map[string]string) (int, []byte) {
	t.Helper()
	raw, _ := json.Marshal(body)
	ctype := "application/json"
	if form {
		raw = []byte(url.Values{"payload": {string(raw)}}.Encode())
		ctype = "application/x-www-form-urlencoded"
	}
	ts := strconv.FormatInt(signedAt.Unix(), 10)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/gateway/slack/"+bindingID, bytes.NewReader(raw))
	req.Header.Set("Content-Type", ctype)
	req.Header.Set(SlackTimestampHeader, ts)
	req.Header.Set(SlackSignatureHeader, SlackSign(key, ts, raw))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}
