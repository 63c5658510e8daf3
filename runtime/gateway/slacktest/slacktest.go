// Package slacktest is a local Slack for tests: the parts of the Web API
// the gateway calls (chat.postMessage, chat.update, apps.connections.open:
// JSON bodies, a bearer token, {ok, error} answers, HTTP 429 with
// Retry-After), Socket Mode's WebSocket, whose connections the test drives,
// and the bodies and signed requests Slack sends a request URL. It signs
// with its own implementation of Slack's v0 scheme, so the gateway's check
// is tested against the scheme, not against itself.
package slacktest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
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

// Timeout is how long the waits of a Fake (Next, Until, Socket, WantAck)
// wait before they fail the test.
const Timeout = 20 * time.Second

// Fake is a local Slack Web API and Socket Mode server.
type Fake struct {
	bot, app string
	srv      *httptest.Server

	mu      sync.Mutex
	calls   []Call
	nextTS  int
	limited map[string]int // method → how many more calls get HTTP 429
	opens   int            // apps.connections.open calls

	posts   chan Call    // every chat.postMessage and chat.update
	sockets chan *Socket // every Socket Mode connection
}

// Call is one Web API call the fake served.
type Call struct {
	Method string
	Body   map[string]any
	TS     string // the message posted or edited
}

// New starts a fake that accepts bot as the bot token and app as the
// app-level token (apps.connections.open); it stops with the test.
func New(t testing.TB, bot, app string) *Fake {
	t.Helper()
	f := &Fake{bot: bot, app: app, limited: map[string]int{}, posts: make(chan Call, 256), sockets: make(chan *Socket, 4)}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

// API is the Web API base URL (the gateway's SlackAPI option).
func (f *Fake) API() string { return f.srv.URL + "/api" }

// Limit makes the next n calls of method answer HTTP 429 (Retry-After: 0).
func (f *Fake) Limit(method string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limited[method] = n
}

func answer(w http.ResponseWriter, v map[string]any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(v)
}

func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/socket" {
		conn, err := ws.Accept(w, r, ws.Options{PingInterval: -1})
		if err != nil {
			return
		}
		f.sockets <- &Socket{Conn: conn, Ticket: r.URL.Query().Get("ticket")}
		return
	}
	method, ok := strings.CutPrefix(r.URL.Path, "/api/")
	if !ok || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	want := "Bearer " + f.bot
	if method == "apps.connections.open" {
		want = "Bearer " + f.app
	}
	if r.Header.Get("Authorization") != want {
		answer(w, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		answer(w, map[string]any{"ok": false, "error": "invalid_form_data"})
		return
	}
	raw, _ := io.ReadAll(r.Body)
	body := map[string]any{}
	if err := json.Unmarshal(raw, &body); err != nil {
		answer(w, map[string]any{"ok": false, "error": "invalid_json"})
		return
	}
	f.mu.Lock()
	if f.limited[method] > 0 {
		f.limited[method]--
		f.calls = append(f.calls, Call{Method: method + " (429)", Body: body})
		f.mu.Unlock()
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusTooManyRequests)
		answer(w, map[string]any{"ok": false, "error": "ratelimited"})
		return
	}
	call := Call{Method: method, Body: body}
	var out map[string]any
	switch method {
	case "chat.postMessage":
		if body["channel"] == nil || (body["text"] == nil && body["blocks"] == nil) {
			f.mu.Unlock()
			answer(w, map[string]any{"ok": false, "error": "no_text"})
			return
		}
		f.nextTS++
		call.TS = fmt.Sprintf("1800000000.%06d", f.nextTS)
		out = map[string]any{"ok": true, "channel": body["channel"], "ts": call.TS, "message": map[string]any{"text": body["text"]}}
	case "chat.update":
		ts, _ := body["ts"].(string)
		if ts == "" {
			f.mu.Unlock()
			answer(w, map[string]any{"ok": false, "error": "message_not_found"})
			return
		}
		call.TS = ts
		out = map[string]any{"ok": true, "channel": body["channel"], "ts": ts, "text": body["text"]}
	case "apps.connections.open":
		f.opens++
		u := "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/socket?ticket=" + strconv.Itoa(f.opens)
		out = map[string]any{"ok": true, "url": u}
	default:
		f.mu.Unlock()
		answer(w, map[string]any{"ok": false, "error": "unknown_method"})
		return
	}
	f.calls = append(f.calls, call)
	f.mu.Unlock()
	if method == "chat.postMessage" || method == "chat.update" {
		f.posts <- call
	}
	answer(w, out)
}

// Methods lists the calls made so far, by method (429s as "m (429)").
func (f *Fake) Methods() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		out = append(out, c.Method)
	}
	return out
}

// Count counts the calls of a method so far.
func (f *Fake) Count(method string) int {
	n := 0
	for _, m := range f.Methods() {
		if m == method {
			n++
		}
	}
	return n
}

// Next returns the next chat.postMessage or chat.update.
func (f *Fake) Next(t testing.TB) Call {
	t.Helper()
	select {
	case c := <-f.posts:
		return c
	case <-time.After(Timeout):
		t.Fatalf("no chat.postMessage or chat.update within %v; calls %v", Timeout, f.Methods())
	}
	return Call{}
}

// Until returns the next chat.postMessage or chat.update keep accepts,
// skipping the others; what names it in the failure.
func (f *Fake) Until(t testing.TB, what string, keep func(Call) bool) Call {
	t.Helper()
	return f.UntilAll(t, what, keep)[0]
}

// UntilAll reads posts until each of keep has accepted one, in any order
// (an approval's outcome and a turn's answer are edited by two
// goroutines), and returns them in keep's order.
func (f *Fake) UntilAll(t testing.TB, what string, keep ...func(Call) bool) []Call {
	t.Helper()
	deadline := time.After(Timeout)
	found := make([]Call, len(keep))
	ok := make([]bool, len(keep))
	left := len(keep)
	var seen []string
	for left > 0 {
		select {
		case c := <-f.posts:
			taken := false
			for i, k := range keep {
				if !ok[i] && k(c) {
					found[i], ok[i], taken = c, true, true
					left--
					break
				}
			}
			if !taken {
				seen = append(seen, fmt.Sprintf("%s %s %.60q", c.Method, c.TS, c.Body["text"]))
			}
		case <-deadline:
			t.Fatalf("not all of %s within %v (found %v); skipped %q", what, Timeout, ok, seen)
		}
	}
	return found
}

// Socket returns the next Socket Mode connection the gateway opened; it
// is closed with the test.
func (f *Fake) Socket(t testing.TB) *Socket {
	t.Helper()
	select {
	case c := <-f.sockets:
		t.Cleanup(func() { _ = c.Conn.Close() })
		return c
	case <-time.After(Timeout):
		t.Fatalf("no Socket Mode connection within %v; calls %v", Timeout, f.Methods())
	}
	return nil
}

// Socket is the server side of one Socket Mode connection.
type Socket struct {
	Conn   *ws.Conn
	Ticket string // the ticket of the apps.connections.open that gave its URL
}

// Send sends an envelope.
func (c *Socket) Send(t testing.TB, env map[string]any) {
	t.Helper()
	raw, _ := json.Marshal(env)
	if err := c.Conn.WriteMessage(context.Background(), raw); err != nil {
		t.Fatalf("socket mode: send %s: %v", env["type"], err)
	}
}

// WantAck reads the acknowledgement of envelope id.
func (c *Socket) WantAck(t testing.TB, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	raw, err := c.Conn.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("socket mode: no acknowledgement of %s: %v", id, err)
	}
	var ack map[string]any
	if json.Unmarshal(raw, &ack) != nil || ack["envelope_id"] != id {
		t.Fatalf("socket mode: acknowledgement %s, want envelope_id %s", raw, id)
	}
}

// Event is an Events API event_callback body of a message (or
// app_mention) event; threadTS "" is none.
func Event(eventID, typ, channel, user, text, ts, threadTS string) map[string]any {
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

// BlockActions is the interactive payload of a button click.
func BlockActions(user, channel, actionID, value string) map[string]any {
	return map[string]any{
		"type": "block_actions", "team": map[string]any{"id": "T0001"},
		"user":    map[string]any{"id": user, "username": "ann", "name": "ann", "team_id": "T0001"},
		"channel": map[string]any{"id": channel, "name": "ops"},
		"actions": []any{map[string]any{"type": "button", "action_id": actionID, "block_id": "trellis_approval", "value": value, "action_ts": "1800000001.000001"}},
	}
}

// Sign is Slack's v0 request signature: "v0=" and the hex HMAC-SHA256,
// keyed by the signing secret, of "v0:{timestamp}:{body}".
func Sign(secret, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%s:", timestamp)
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// Request POSTs a request to a binding's request URL on the gateway
// receiver at addr, as Slack does: body as JSON, or with form the
// interactive payload= form; signed with key at signedAt; headers added.
// It returns the status and the body of the answer.
func Request(t testing.TB, addr, bindingID, key string, signedAt time.Time, body map[string]any, form bool, headers map[string]string) (int, []byte) {
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
	req.Header.Set("X-Slack-Request-Timestamp", ts)
	req.Header.Set("X-Slack-Signature", Sign(key, ts, raw))
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
