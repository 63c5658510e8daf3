package e2e

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

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/protocol/ws"
	"github.com/trellis-run/trellis/runtime/gateway"
)

// slackServer is a local server speaking Slack's Web API as the gateway
// calls it (chat.postMessage, chat.update, apps.connections.open: POSTed
// JSON with a bearer token, answered {ok, error, ...}) and Socket Mode's
// WebSocket (the connections go to the test through sockets).
type slackServer struct {
	bot, app string
	srv      *httptest.Server

	mu     sync.Mutex
	calls  []slackAPICall
	nextTS int
	opens  int

	posts   chan slackAPICall
	sockets chan *ws.Conn
}

// slackAPICall is one chat.postMessage or chat.update.
type slackAPICall struct {
	Method string
	Body   map[string]any
	TS     string
}

func newSlackServer(t *testing.T, bot, app string) *slackServer {
	t.Helper()
	s := &slackServer{bot: bot, app: app, posts: make(chan slackAPICall, 256), sockets: make(chan *ws.Conn, 4)}
	s.srv = httptest.NewServer(s)
	t.Cleanup(s.srv.Close)
	return s
}

func (s *slackServer) API() string { return s.srv.URL + "/api" }

func (s *slackServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	answer := func(v map[string]any) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_ = json.NewEncoder(w).Encode(v)
	}
	if r.URL.Path == "/socket" {
		if c, err := ws.Accept(w, r, ws.Options{PingInterval: -1}); err == nil {
			s.sockets <- c
		}
		return
	}
	method, _ := strings.CutPrefix(r.URL.Path, "/api/")
	token := s.bot
	if method == "apps.connections.open" {
		token = s.app
	}
	if r.Header.Get("Authorization") != "Bearer "+token {
		answer(map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	raw, _ := io.ReadAll(r.Body)
	body := map[string]any{}
	if json.Unmarshal(raw, &body) != nil {
		answer(map[string]any{"ok": false, "error": "invalid_json"})
		return
	}
	s.mu.Lock()
	call := slackAPICall{Method: method, Body: body}
	var out map[string]any
	switch method {
	case "chat.postMessage":
		s.nextTS++
		call.TS = fmt.Sprintf("1800000000.%06d", s.nextTS)
		out = map[string]any{"ok": true, "channel": body["channel"], "ts": call.TS}
	case "chat.update":
		call.TS, _ = body["ts"].(string)
		out = map[string]any{"ok": true, "channel": body["channel"], "ts": call.TS}
	case "apps.connections.open":
		s.opens++
		out = map[string]any{"ok": true, "url": "ws" + strings.TrimPrefix(s.srv.URL, "http") + "/socket?ticket=" + strconv.Itoa(s.opens)}
	default:
		s.mu.Unlock()
		answer(map[string]any{"ok": false, "error": "unknown_method"})
		return
	}
	s.calls = append(s.calls, call)
	s.mu.Unlock()
	if method != "apps.connections.open" {
		s.posts <- call
	}
	answer(out)
}

// count counts the calls of a method so far.
func (s *slackServer) count(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if c.Method == method {
			n++
		}
	}
	return n
}

// until returns the next chat.postMessage or chat.update keep accepts.
func (s *slackServer) until(t *testing.T, what string, keep func(slackAPICall) bool) slackAPICall {
	t.Helper()
	deadline := time.After(gatewayTimeout)
	var seen []string
	for {
		select {
		case c := <-s.posts:
			if keep(c) {
				return c
			}
			seen = append(seen, fmt.Sprintf("%s %s %.60q", c.Method, c.TS, c.Body["text"]))
		case <-deadline:
			t.Fatalf("no %s within %s; skipped %q", what, gatewayTimeout, seen)
		}
	}
}

// untilAll reads posts until each of keep has accepted one, in any order
// (the approval's outcome and the turn's answer are edited by two
// goroutines), and returns them in keep's order.
func (s *slackServer) untilAll(t *testing.T, what string, keep ...func(slackAPICall) bool) []slackAPICall {
	t.Helper()
	deadline := time.After(gatewayTimeout)
	found := make([]slackAPICall, len(keep))
	ok := make([]bool, len(keep))
	left := len(keep)
	var seen []string
	for left > 0 {
		select {
		case c := <-s.posts:
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
			t.Fatalf("not all of %s within %s (found %v); skipped %q", what, gatewayTimeout, ok, seen)
		}
	}
	return found
}

// slackEvent is an Events API event_callback body.
func slackEvent(eventID, typ, channel, user, text, ts, threadTS string) map[string]any {
	ev := map[string]any{"type": typ, "channel": channel, "user": user, "text": text, "ts": ts, "event_ts": ts}
	if threadTS != "" {
		ev["thread_ts"] = threadTS
	}
	return map[string]any{"token": "unused", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
		"event_id": eventID, "event_time": time.Now().Unix(), "event": ev}
}

// slackSigned POSTs body, signed with key, to a binding's request URL on
// the daemon's gateway receiver: JSON, or with form the payload= form of
// an interactive request.
func slackSigned(t *testing.T, d *daemon.Daemon, bindingID, key string, body map[string]any, form bool, hdr map[string]string) int {
	t.Helper()
	raw, _ := json.Marshal(body)
	ctype := "application/json"
	if form {
		raw, ctype = []byte(url.Values{"payload": {string(raw)}}.Encode()), "application/x-www-form-urlencoded"
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, _ := http.NewRequest(http.MethodPost, "http://"+d.GatewayAddr()+"/v1/gateway/slack/"+bindingID, bytes.NewReader(raw))
	req.Header.Set("Content-Type", ctype)
	req.Header.Set(gateway.SlackTimestampHeader, ts)
	req.Header.Set(gateway.SlackSignatureHeader, gateway.SlackSign(key, ts, raw))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// slackAck reads a Socket Mode acknowledgement and checks its envelope id.
func slackAck(t *testing.T, c *ws.Conn, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), gatewayTimeout)
	defer cancel()
	raw, err := c.ReadMessage(ctx)
	var ack map[string]any
	if err != nil || json.Unmarshal(raw, &ack) != nil || ack["envelope_id"] != id {
		t.Fatalf("acknowledgement of %s: %s %v", id, raw, err)
	}
}

// slackSend sends a Socket Mode envelope.
func slackSend(t *testing.T, c *ws.Conn, env map[string]any) {
	t.Helper()
	raw, _ := json.Marshal(env)
	if err := c.WriteMessage(context.Background(), raw); err != nil {
		t.Fatal(err)
	}
}
