package e2e

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/gateway"
	"github.com/trellis-run/trellis/runtime/gateway/slacktest"
)

const (
	slackBotToken = "xoxb-e2e-1111-2222-bot-token-value"
	slackAppToken = "xapp-1-AE2E-3333-app-token-value"
	slackSecret   = "e2e8f742231b10e8888abcd99yyyzzz85"
)

// writeSlackSecret places the Slack credential in home's secrets.
func writeSlackSecret(t *testing.T, home, value string) {
	t.Helper()
	dir := gateway.SecretsDir(home)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "slack"), []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestGatewaySlackEvents: a Slack binding on the Events API, against a
// local server speaking Slack's Web API. A request with a bad signature is
// refused with 401 and runs nothing. An app mention asking for a command
// becomes a turn of the scripted model; its approval request is posted in
// the thread with buttons, and a signed click allows it as the clicking
// user; Slack's retry of the event is not answered again. A long answer in
// the thread is posted, then edited as it streams, to the whole answer.
func TestGatewaySlackEvents(t *testing.T) {
	slack := slacktest.New(t, slackBotToken, slackAppToken)
	t.Setenv(gateway.SlackAPIEnv, slack.API())
	home := t.TempDir()
	writeSlackSecret(t, home, "bot_token="+slackBotToken+"\nsigning_secret="+slackSecret+"\n")
	d := startDaemonHome(t, home, daemon.Config{})
	ctx := context.Background()
	c := dialGRPC(t, d)
	var bound struct {
		BindingID string `json:"bindingId"`
	}
	if err := c.Call(ctx, "gateway.bind", map[string]any{
		"platform": "slack", "credentialsRef": "slack", "channelId": "C0E2E",
		"target": map[string]any{"newSession": map[string]any{"workdir": home}},
	}, &bound); err != nil {
		t.Fatalf("bind: %v", err)
	}
	id := bound.BindingID
	// Socket Mode needs an app-level token this credential does not have.
	err := c.Call(ctx, "gateway.bind", map[string]any{
		"platform": "slack", "credentialsRef": "slack", "mode": "socket",
		"target": map[string]any{"newSession": map[string]any{"workdir": home}},
	}, nil)
	if err == nil || err.StringCode() != "invalid_params" || !strings.Contains(err.Message, "app-level token") || strings.Contains(err.Message, slackBotToken) {
		t.Fatalf("socket mode without an app token: %v", err)
	}

	if code := slackSigned(t, d, id, "not-the-secret", slacktest.Event("EvBad", "message", "C0E2E", "U0001", "hello", "1700000000.000001", ""), false, nil); code != http.StatusUnauthorized {
		t.Fatalf("bad signature: %d, want 401", code)
	}
	mention := slacktest.Event("Ev01", "app_mention", "C0E2E", "U0001", "<@UBOT> run ls", "1700000000.000100", "")
	if code := slackSigned(t, d, id, slackSecret, mention, false, nil); code != http.StatusOK {
		t.Fatalf("event: %d", code)
	}
	ask := slack.Until(t, "approval request post", func(c slacktest.Call) bool { return c.Method == "chat.postMessage" && c.Body["blocks"] != nil })
	if ask.Body["thread_ts"] != "1700000000.000100" || ask.Body["channel"] != "C0E2E" {
		t.Fatalf("approval post %v, want it in the mention's thread", ask.Body)
	}
	var reqID string
	for _, b := range ask.Body["blocks"].([]any) {
		for _, e := range asSlice(b.(map[string]any)["elements"]) {
			if e := e.(map[string]any); strings.Contains(e["action_id"].(string), "allow") {
				reqID, _ = e["value"].(string)
			}
		}
	}
	if !strings.HasPrefix(reqID, "ap-") {
		t.Fatalf("no Allow button with the request id: %v", ask.Body["blocks"])
	}
	// Slack retries the event while the turn waits.
	if code := slackSigned(t, d, id, slackSecret, mention, false, map[string]string{"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}); code != http.StatusOK {
		t.Fatalf("retry: %d", code)
	}
	click := map[string]any{"type": "block_actions", "user": map[string]any{"id": "U0777", "username": "ann"},
		"channel": map[string]any{"id": "C0E2E"}, "actions": []any{map[string]any{"type": "button", "action_id": "trellis_approval_allow", "value": reqID}}}
	if code := slackSigned(t, d, id, "forged", click, true, nil); code != http.StatusUnauthorized {
		t.Fatalf("forged click: %d, want 401", code)
	}
	if code := slackSigned(t, d, id, slackSecret, click, true, nil); code != http.StatusOK {
		t.Fatalf("click: %d", code)
	}
	// The approval's outcome, and the whole turn's text as its message.done
	// has it: edited by two goroutines, so in either order.
	slack.UntilAll(t, "the approval's outcome and the answer after the tool",
		func(c slacktest.Call) bool {
			return c.Method == "chat.update" && c.TS == ask.TS && strings.Contains(c.Body["text"].(string), "Allowed by <@U0777>")
		},
		func(c slacktest.Call) bool { return c.Body["text"] == "Running ls.That was the listing." })

	// A long streamed answer in the thread: posted, then edited to the whole.
	if code := slackSigned(t, d, id, slackSecret, slacktest.Event("Ev02", "message", "C0E2E", "U0001", "many", "1700000000.000200", "1700000000.000100"), false, nil); code != http.StatusOK {
		t.Fatalf("event: %d", code)
	}
	want := strings.TrimSpace(strings.Repeat("many ", 3000))
	first := slack.Until(t, "the long answer's post", func(c slacktest.Call) bool {
		return c.Method == "chat.postMessage" && strings.HasPrefix(c.Body["text"].(string), "many")
	})
	if first.Body["thread_ts"] != "1700000000.000100" || strings.TrimSpace(first.Body["text"].(string)) == want {
		t.Fatalf("first post %.80v, want the answer's beginning in the thread", first.Body)
	}
	slack.Until(t, "the long answer's last edit", func(c slacktest.Call) bool {
		return c.Method == "chat.update" && c.TS == first.TS && strings.TrimSpace(c.Body["text"].(string)) == want
	})

	var sessions struct {
		Sessions []map[string]any `json:"sessions"`
	}
	if err := c.Call(ctx, "session.list", map[string]any{}, &sessions); err != nil {
		t.Fatal(err)
	}
	if len(sessions.Sessions) != 1 {
		t.Fatalf("%d sessions, want the one conversation's (nothing ran for the forged request)", len(sessions.Sessions))
	}
	d.Stop()
	// Three posts: the first answer, its approval request, the long answer.
	if n := slack.Count("chat.postMessage"); n != 3 {
		t.Fatalf("%d chat.postMessage, want 3 (the retry answered nothing)", n)
	}
	if logText, _ := os.ReadFile(daemon.LogPath(home)); bytes.Contains(logText, []byte(slackBotToken)) || bytes.Contains(logText, []byte(slackSecret)) {
		t.Fatal("the daemon log shows a Slack credential")
	}
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

// TestGatewaySlackSocketMode: a Slack binding in Socket Mode (its
// credential has an app-level token) opens a connection, acknowledges the
// envelopes, answers an events_api message with the scripted model, and
// after a disconnect envelope connects again and goes on.
func TestGatewaySlackSocketMode(t *testing.T) {
	slack := slacktest.New(t, slackBotToken, slackAppToken)
	t.Setenv(gateway.SlackAPIEnv, slack.API())
	home := t.TempDir()
	writeSlackSecret(t, home, "bot_token="+slackBotToken+"\napp_token="+slackAppToken+"\n")
	d := startDaemonHome(t, home, daemon.Config{})
	c := dialGRPC(t, d)
	if err := c.Call(context.Background(), "gateway.bind", map[string]any{
		"platform": "slack", "credentialsRef": "secret:slack", "mode": "socket",
		"target": map[string]any{"newSession": map[string]any{"workdir": home}},
	}, nil); err != nil {
		t.Fatalf("bind: %v", err)
	}
	for i, text := range []string{"hello", "anything"} {
		sock := slack.Socket(t)
		sock.Send(t, map[string]any{"type": "hello", "num_connections": 1})
		env := map[string]any{"envelope_id": "env-" + text, "type": "events_api", "retry_attempt": 0,
			"payload": slacktest.Event("EvS"+text, "message", "D0001", "U0001", text, "1700000001.00000"+string(rune('1'+i)), "")}
		sock.Send(t, env)
		sock.WantAck(t, "env-"+text)
		want := map[string]string{"hello": "Hello from the scripted model, streamed in small chunks.", "anything": "Default answer."}[text]
		slack.Until(t, "the answer to "+text, func(c slacktest.Call) bool { return c.Body["text"] == want })
		sock.Send(t, map[string]any{"type": "disconnect", "reason": "refresh_requested"})
	}
	if n := slack.Count("apps.connections.open"); n < 2 {
		t.Fatalf("%d apps.connections.open, want a new connection after the disconnect", n)
	}
}

// slackSigned POSTs body, signed with key now, to a binding's request URL
// on the daemon's gateway receiver (slacktest.Request) and returns the
// answer's status.
func slackSigned(t *testing.T, d *daemon.Daemon, bindingID, key string, body map[string]any, form bool, hdr map[string]string) int {
	t.Helper()
	code, _ := slacktest.Request(t, d.GatewayAddr(), bindingID, key, time.Now(), body, form, hdr)
	return code
}
