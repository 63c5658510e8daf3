package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/gateway"
	"github.com/trellis-run/trellis/runtime/gateway/telegramtest"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TestPostgresScaleOutGateway: two daemons on one database. A Telegram
// binding made through A after both started is picked up by B at run time;
// its poller runs on the one daemon holding the binding's lease, so a
// message is answered once (one sendMessage, one turn). After a kill -9 of
// that daemon the other takes the lease over and answers the next message,
// once, in the same conversation. A binding removed through the survivor
// stops.
func TestPostgresScaleOutGateway(t *testing.T) {
	bot := telegramtest.New(t, telegramToken)
	t.Setenv(gateway.TelegramAPIEnv, bot.URL())
	t.Setenv("TRELLIS_E2E_TG_TOKEN", telegramToken)
	dsn, procs := startCluster(t, 2)
	db := clusterDB(t, dsn)
	ctx := context.Background()
	clients := []*grpcClient{dialInfo(t, procs[0].info), dialInfo(t, procs[1].info)}
	daemonIDs := make([]string, 2)
	for i, p := range procs {
		b, err := os.ReadFile(filepath.Join(p.home, "daemon-id"))
		if err != nil {
			t.Fatal(err)
		}
		daemonIDs[i] = strings.TrimSpace(string(b))
	}

	var bound struct {
		BindingID string `json:"bindingId"`
	}
	if err := clients[0].Call(ctx, "gateway.bind", map[string]any{
		"platform": "telegram", "credentialsRef": "env:TRELLIS_E2E_TG_TOKEN", "channelId": "12345",
		"target": map[string]any{"newSession": map[string]any{"workdir": t.TempDir()}},
	}, &bound); err != nil {
		t.Fatalf("gateway.bind via A: %v", err)
	}
	listed := func(c *grpcClient) bool {
		var res struct {
			Bindings []struct {
				BindingID string `json:"bindingId"`
			} `json:"bindings"`
		}
		if err := c.Call(ctx, "gateway.list", map[string]any{}, &res); err != nil {
			t.Fatal(err)
		}
		for _, b := range res.Bindings {
			if b.BindingID == bound.BindingID {
				return true
			}
		}
		return false
	}
	scaleWaitFor(t, "B lists the binding made through A", func() bool { return listed(clients[1]) })

	send := func(text string) int64 { return bot.Message(12345, 5, text) }
	// answered waits for the answer to message mid, then makes sure no
	// second answer comes (two pollers would both answer within a poll);
	// edits of the answer as it streams are not answers.
	answered := func(mid int64) {
		t.Helper()
		select {
		case m := <-bot.Calls():
			if m.Method != "sendMessage" || m.Body["reply_to_message_id"] != float64(mid) {
				t.Fatalf("call %+v, want a sendMessage replying to %d", m, mid)
			}
		case <-time.After(2 * gatewayTimeout):
			t.Fatalf("no answer to message %d", mid)
		}
		quiet := time.After(3 * time.Second)
		for {
			select {
			case m := <-bot.Calls():
				if m.Method == "sendMessage" {
					t.Fatalf("message %d answered twice: %+v", mid, m)
				}
			case <-quiet:
				return
			}
		}
	}
	turns := func() (n, sessions int) {
		if err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT session_id) FROM events WHERE kind = 'turn.started'`).Scan(&n, &sessions); err != nil {
			t.Fatal(err)
		}
		return n, sessions
	}
	holder := func() int {
		var owner string
		if err := db.QueryRow(ctx, `SELECT owner_id FROM session_leases WHERE session_id = $1 AND expires_at > now()`, "gateway/"+bound.BindingID).Scan(&owner); err != nil {
			t.Fatalf("the binding's lease: %v", err)
		}
		for i, d := range daemonIDs {
			if d == owner {
				return i
			}
		}
		t.Fatalf("the binding's lease names %s, not one of %v", owner, daemonIDs)
		return -1
	}

	answered(send("hello"))
	if n, s := turns(); n != 1 || s != 1 {
		t.Fatalf("after one message: %d turns in %d sessions, want 1 in 1", n, s)
	}

	// kill -9 of the poller's daemon: the other takes over.
	h := holder()
	procs[h].kill()
	survivor := 1 - h
	answered(send("hello again"))
	if n, s := turns(); n != 2 || s != 1 {
		t.Fatalf("after the takeover: %d turns in %d sessions, want 2 in 1 (the same conversation)", n, s)
	}
	if got := holder(); got != survivor {
		t.Fatalf("the lease is with daemon %d, want the survivor %d", got, survivor)
	}

	// Removed through the survivor: no more answers.
	if err := clients[survivor].Call(ctx, "gateway.unbind", map[string]any{"bindingId": bound.BindingID}, nil); err != nil {
		t.Fatal(err)
	}
	send("anyone?")
	select {
	case m := <-bot.Calls():
		t.Fatalf("an unbound binding answered: %v", m)
	case <-time.After(3 * time.Second):
	}
	t.Logf("2 daemons: 2 messages, 2 turns, 2 answers; the lease moved from daemon %d to %d after kill -9", h, survivor)
}

// scaleWaitFor polls cond for up to 20 s.
func scaleWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPostgresScaleOutGatewayWebhook: a webhook conversation whose messages
// reach two daemons' receivers. The first message, posted to A, begins the
// conversation's session on A; the second, posted to B, is prompted on A
// through forwarding, in the same session, and B answers it. One turn per
// message.
func TestPostgresScaleOutGatewayWebhook(t *testing.T) {
	const hookKey = "whsec-scaleout-0123456789abcdef"
	t.Setenv("TRELLIS_E2E_HOOK", hookKey)
	dsn := pgtest.FreshDatabase(t, pgtest.Server(t))
	ports := make([]int, 2)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	a := startClusterProc(t, dsn, "--gateway-port", fmt.Sprint(ports[0]))
	b := startClusterProc(t, dsn, "--gateway-port", fmt.Sprint(ports[1]))
	ca, cb := dialInfo(t, a.info), dialInfo(t, b.info)
	db := clusterDB(t, dsn)
	ctx := context.Background()
	var bound struct {
		BindingID string `json:"bindingId"`
	}
	if err := ca.Call(ctx, "gateway.bind", map[string]any{
		"platform": "webhook", "credentialsRef": "env:TRELLIS_E2E_HOOK",
		"target": map[string]any{"newSession": map[string]any{"workdir": t.TempDir()}},
	}, &bound); err != nil {
		t.Fatalf("gateway.bind via A: %v", err)
	}
	scaleWaitFor(t, "B lists the binding", func() bool {
		var res map[string]any
		if err := cb.Call(ctx, "gateway.list", map[string]any{}, &res); err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(res)
		return bytes.Contains(raw, []byte(bound.BindingID))
	})
	post := func(port int, id string) gateway.WebhookReply {
		t.Helper()
		raw, _ := json.Marshal(map[string]any{"text": "hello", "messageId": id, "channelId": "c-1", "userId": "u-1", "wait": true})
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/gateway/webhook/%s", port, bound.BindingID), bytes.NewReader(raw))
		req.Header.Set(gateway.SignatureHeader, gateway.Sign(hookKey, raw))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var reply gateway.WebhookReply
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &reply) != nil || !strings.Contains(reply.Text, "Hello from the scripted model") {
			t.Fatalf("message %s: HTTP %d %s", id, resp.StatusCode, body)
		}
		return reply
	}
	post(ports[0], "m-1")
	post(ports[1], "m-2")
	var n, sessions int
	if err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT session_id) FROM events WHERE kind = 'turn.started'`).Scan(&n, &sessions); err != nil {
		t.Fatal(err)
	}
	if n != 2 || sessions != 1 {
		t.Fatalf("two messages of one conversation through A and B: %d turns in %d sessions, want 2 in 1", n, sessions)
	}
}
