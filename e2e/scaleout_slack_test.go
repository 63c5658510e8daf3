package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/gateway"
	"github.com/trellis-run/trellis/runtime/gateway/slacktest"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TestPostgresScaleOutSlack: two daemons on one database share a Slack
// Events API binding made through A. Slack's request reaches A and its
// retry reaches B at once: the message is answered once (one turn, one
// chat.postMessage). A second message, reaching B only, is answered by B.
func TestPostgresScaleOutSlack(t *testing.T) {
	slack := slacktest.New(t, slackBotToken, slackAppToken)
	t.Setenv(gateway.SlackAPIEnv, slack.API())
	t.Setenv("TRELLIS_E2E_SLACK", slackBotToken)
	t.Setenv("SLACK_SIGNING_SECRET", slackSecret)
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
		"platform": "slack", "credentialsRef": "env:TRELLIS_E2E_SLACK", "mode": "events",
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
	send := func(port int, body map[string]any, retry bool) {
		raw, _ := json.Marshal(body)
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/gateway/slack/%s", port, bound.BindingID), bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(gateway.SlackTimestampHeader, ts)
		req.Header.Set(gateway.SlackSignatureHeader, gateway.SlackSign(slackSecret, ts, raw))
		if retry {
			req.Header.Set(gateway.SlackRetryHeader, "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("event to :%d: HTTP %d", port, resp.StatusCode)
		}
	}
	const answer = "Hello from the scripted model, streamed in small chunks."
	ev := slacktest.Event("EvScale1", "message", "C0SC", "U0001", "hello", "1700000005.000100", "")
	var wg sync.WaitGroup
	for i, port := range ports {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(port, ev, i == 1)
		}()
	}
	wg.Wait()
	slack.Until(t, "the answer", func(c slacktest.Call) bool { return c.Body["text"] == answer })
	// A second message, through B only: answered too, once.
	send(ports[1], slacktest.Event("EvScale2", "message", "C0SC", "U0001", "anything", "1700000005.000200", ""), false)
	slack.Until(t, "the second answer", func(c slacktest.Call) bool { return c.Body["text"] == "Default answer." })
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM events WHERE kind = 'turn.started'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d turns, want one per message (the retry through B answered nothing)", n)
	}
	if got := slack.Count("chat.postMessage"); got != 2 {
		t.Fatalf("%d chat.postMessage, want 2", got)
	}
}
