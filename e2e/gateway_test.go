package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/gateway"
	"github.com/trellis-run/trellis/runtime/gateway/telegramtest"
)

const (
	webhookSecret  = "whsec-e2e-0123456789abcdef"
	telegramToken  = "4242:e2e-telegram-bot-token"
	gatewayTimeout = 20 * time.Second
)

// signedPost posts a webhook message signed with key to the daemon's receiver.
func signedPost(t *testing.T, d *daemon.Daemon, bindingID, key string, msg map[string]any) (int, []byte) {
	t.Helper()
	raw, _ := json.Marshal(msg)
	req, _ := http.NewRequest(http.MethodPost, "http://"+d.GatewayAddr()+"/v1/gateway/webhook/"+bindingID, bytes.NewReader(raw))
	req.Header.Set(gateway.SignatureHeader, gateway.Sign(key, raw))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// writeWebhookSecret puts webhookSecret in home's gateway secrets as
// "hook", mode 0600.
func writeWebhookSecret(t *testing.T, home string) {
	t.Helper()
	secrets := gateway.SecretsDir(home)
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secrets, "hook"), []byte(webhookSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestGatewayWebhook: a webhook binding on a 0600 secret answers a signed
// message at its replyUrl, refuses a bad signature, shows in gateway.list
// (and the log) without its credential, emits gateway.event over
// WebSocket, survives a restart, and unbinds once.
func TestGatewayWebhook(t *testing.T) {
	home := t.TempDir()
	writeWebhookSecret(t, home)
	d := startDaemonHome(t, home, daemon.Config{})
	ctx := context.Background()
	c := dialGRPC(t, d)
	ws := helloWS(t, d)

	var bound struct {
		BindingID string `json:"bindingId"`
	}
	if err := c.Call(ctx, "gateway.bind", map[string]any{
		"platform": "webhook", "credentialsRef": "secret:hook",
		"target": map[string]any{"newSession": map[string]any{"workdir": home, "mode": "plan"}},
	}, &bound); err != nil || !strings.HasPrefix(bound.BindingID, "b-") {
		t.Fatalf("bind: %v %+v", err, bound)
	}
	// A missing credential names the ref.
	err := c.Call(ctx, "gateway.bind", map[string]any{
		"platform": "webhook", "credentialsRef": "env:TRELLIS_E2E_MISSING",
		"target": map[string]any{"newSession": map[string]any{"workdir": home}},
	}, nil)
	if err == nil || err.StringCode() != "invalid_params" || !strings.Contains(err.Message, "env:TRELLIS_E2E_MISSING") {
		t.Fatalf("missing credential: %v", err)
	}

	replies := make(chan map[string]any, 1)
	replySrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		replies <- m
	}))
	defer replySrv.Close()

	code, body := signedPost(t, d, bound.BindingID, webhookSecret, map[string]any{"text": "hello", "userId": "u1", "messageId": "m-1", "replyUrl": replySrv.URL})
	if code != http.StatusAccepted {
		t.Fatalf("signed post: %d %s", code, body)
	}
	select {
	case m := <-replies:
		if m["bindingId"] != bound.BindingID || m["inReplyTo"] != "m-1" || !strings.Contains(fmt.Sprint(m["text"]), "Hello from the scripted model") {
			t.Fatalf("reply %v", m)
		}
	case <-time.After(gatewayTimeout):
		t.Fatal("no reply at replyUrl")
	}
	// wait: true returns the answer as the response.
	code, body = signedPost(t, d, bound.BindingID, webhookSecret, map[string]any{"text": "anything", "userId": "u1", "wait": true})
	if code != 200 || !strings.Contains(string(body), "Default answer.") {
		t.Fatalf("wait post: %d %s", code, body)
	}
	if code, body := signedPost(t, d, bound.BindingID, "not-the-secret", map[string]any{"text": "hello", "wait": true}); code != http.StatusUnauthorized {
		t.Fatalf("bad signature: %d %s", code, body)
	}

	// gateway.event reached the WebSocket client: message then reply.
	seen := map[string]bool{}
	deadline := time.After(gatewayTimeout)
	for !seen["reply"] {
		select {
		case f := <-ws.notes:
			if f.Method != "gateway.event" {
				continue
			}
			if bytes.Contains(f.Params, []byte(webhookSecret)) {
				t.Fatal("gateway.event shows the credential")
			}
			var ev struct {
				BindingID string `json:"bindingId"`
				Kind      string `json:"kind"`
			}
			_ = json.Unmarshal(f.Params, &ev)
			if ev.BindingID == bound.BindingID {
				seen[ev.Kind] = true
			}
		case <-deadline:
			t.Fatalf("gateway.event seen %v", seen)
		}
	}
	if !seen["message"] {
		t.Fatalf("no gateway.event message before the reply: %v", seen)
	}

	checkList := func(d *daemon.Daemon, c *grpcClient) {
		t.Helper()
		var list struct {
			Bindings []map[string]any `json:"bindings"`
		}
		raw := map[string]any{}
		if err := c.Call(ctx, "gateway.list", map[string]any{}, &raw); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(raw)
		_ = json.Unmarshal(b, &list)
		if bytes.Contains(b, []byte(webhookSecret)) {
			t.Fatalf("gateway.list shows the credential: %s", b)
		}
		if len(list.Bindings) != 1 || list.Bindings[0]["bindingId"] != bound.BindingID || list.Bindings[0]["target"] != "newSession:"+home ||
			list.Bindings[0]["platform"] != "webhook" || list.Bindings[0]["state"] != "active" {
			t.Fatalf("gateway.list: %s", b)
		}
		var info map[string]any
		if err := c.Call(ctx, "system.info", map[string]any{}, &info); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(fmt.Sprint(info["counters"]), "gatewayBindings:1") {
			t.Fatalf("system.info counters: %v", info["counters"])
		}
	}
	checkList(d, c)

	// Restart: the binding is restored and still answers.
	d.Stop()
	d = startDaemonHome(t, home, daemon.Config{})
	c = dialGRPC(t, d)
	checkList(d, c)
	code, body = signedPost(t, d, bound.BindingID, webhookSecret, map[string]any{"text": "hello", "userId": "u1", "wait": true})
	if code != 200 || !strings.Contains(string(body), "Hello from the scripted model") {
		t.Fatalf("after restart: %d %s", code, body)
	}

	if err := c.Call(ctx, "gateway.unbind", map[string]any{"bindingId": bound.BindingID}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "gateway.unbind", map[string]any{"bindingId": bound.BindingID}, nil); err == nil || err.StringCode() != "not_found" {
		t.Fatalf("second unbind: %v", err)
	}
	d.Stop()
	logText, rerr := os.ReadFile(daemon.LogPath(home))
	if rerr != nil {
		t.Fatal(rerr)
	}
	if bytes.Contains(logText, []byte(webhookSecret)) {
		t.Fatal("the daemon log shows the credential")
	}
	if !bytes.Contains(logText, []byte("gateway binding added")) {
		t.Fatal("the daemon log has no gateway line: wrong log file?")
	}
}

// TestGatewayTelegram: agent.bindChannel binds a Telegram chat to an agent;
// a message polled from a local Bot API is answered with sendMessage as a
// reply (then edited as the answer streams, when it does).
func TestGatewayTelegram(t *testing.T) {
	bot := telegramtest.New(t, telegramToken)
	t.Setenv(gateway.TelegramAPIEnv, bot.URL())
	t.Setenv("TRELLIS_E2E_TG_TOKEN", telegramToken)
	home := t.TempDir()
	d := startDaemonHome(t, home, daemon.Config{})
	ctx := context.Background()
	c := dialGRPC(t, d)
	if err := c.Call(ctx, "agent.create", map[string]any{"name": "reviewer", "description": "reviews"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "agent.bindChannel", map[string]any{"name": "reviewer", "channel": "telegram:12345", "credentialsRef": "env:TRELLIS_E2E_TG_TOKEN"}, nil); err != nil {
		t.Fatal(err)
	}
	mid := bot.Message(12345, 5, "hello")
	first := bot.Next(t)
	if first.Method != "sendMessage" || first.Body["chat_id"] != float64(12345) || first.Body["reply_to_message_id"] != float64(mid) {
		t.Fatalf("first call %+v, want a sendMessage replying to %d", first, mid)
	}
	if !strings.Contains(first.Text(), "Hello from the scripted model") {
		bot.Until(t, "the whole answer", func(c telegramtest.Call) bool {
			return c.Method == "editMessageText" && c.MessageID == first.MessageID && strings.Contains(c.Text(), "Hello from the scripted model")
		})
	}
	var agents struct {
		Agents []struct {
			Name     string   `json:"name"`
			Channels []string `json:"channels"`
		} `json:"agents"`
	}
	if err := c.Call(ctx, "agent.list", map[string]any{}, &agents); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range agents.Agents {
		if a.Name == "reviewer" && len(a.Channels) == 1 && a.Channels[0] == "telegram:12345" {
			found = true
		}
	}
	if !found {
		t.Fatalf("agent.list channels: %+v", agents)
	}
	raw := map[string]any{}
	if err := c.Call(ctx, "gateway.list", map[string]any{}, &raw); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(raw)
	if bytes.Contains(b, []byte(telegramToken)) || !strings.Contains(string(b), `"target":"agent:reviewer"`) || !strings.Contains(string(b), `"state":"active"`) {
		t.Fatalf("gateway.list: %s", b)
	}
	d.Stop()
	if logText, _ := os.ReadFile(daemon.LogPath(home)); bytes.Contains(logText, []byte(telegramToken)) {
		t.Fatal("the daemon log shows the bot token")
	}
}
