package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/gateway"
	"github.com/trellis-run/trellis/runtime/gateway/discordtest"
)

const (
	discordToken   = "MTIzNDU2Nzg5MDEy.e2e-discord-bot-token"
	discordChannel = "610000000000000001"
	discordUser    = "510000000000000001"
)

// discordReply waits for the one post replying to message mid and returns
// the text it shows once it holds want.
func discordReply(t *testing.T, fd *discordtest.Fake, mid, want string) discordtest.Post {
	t.Helper()
	var p discordtest.Post
	fd.WaitFor("the reply to "+mid+" showing "+want, func() bool {
		rs := fd.RepliesTo(mid)
		if len(rs) == 0 {
			return false
		}
		p = rs[0]
		return strings.Contains(fd.LastContent(p.ID), want)
	})
	return p
}

// TestGatewayDiscord: a Discord binding made with gateway.bind connects to
// a local Discord (Gateway WebSocket + REST); a channel message becomes a
// turn of the scripted model and its answer is posted as a reply; a turn
// whose shell call needs approval posts Allow/Deny buttons, and the click
// (an INTERACTION_CREATE) lets the call run, where a click forged for the
// Interactions Endpoint is refused with 401. The token appears in no
// result and no log line.
func TestGatewayDiscord(t *testing.T) {
	fd := discordtest.New(t, discordToken)
	t.Setenv(gateway.DiscordAPIEnv, fd.API())
	t.Setenv("TRELLIS_E2E_DC_TOKEN", discordToken)
	app := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{5}, ed25519.SeedSize))
	t.Setenv("TRELLIS_E2E_DC_TOKEN_PUBLIC_KEY", hex.EncodeToString(app.Public().(ed25519.PublicKey)))
	home := t.TempDir()
	d := startDaemonHome(t, home, daemon.Config{})
	ctx := context.Background()
	c := dialGRPC(t, d)
	err := c.Call(ctx, "gateway.bind", map[string]any{"platform": "discord", "credentialsRef": "env:TRELLIS_E2E_DC_TOKEN",
		"channelId": "general", "target": map[string]any{"newSession": map[string]any{"workdir": t.TempDir()}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "channelId") {
		t.Fatalf("a channelId that is not a snowflake: %v, want invalid_params naming channelId", err)
	}
	if err := c.Call(ctx, "gateway.bind", map[string]any{"platform": "discord", "credentialsRef": "env:TRELLIS_E2E_DC_TOKEN",
		"channelId": discordChannel, "target": map[string]any{"newSession": map[string]any{"workdir": t.TempDir()}}}, nil); err != nil {
		t.Fatalf("gateway.bind discord: %v", err)
	}
	fd.Live()
	m1 := fd.Message(discordChannel, discordUser, "hello", false)
	discordReply(t, fd, m1, "Hello from the scripted model")

	m2 := fd.Message(discordChannel, discordUser, "run ls", false)
	var ask discordtest.Post
	fd.WaitFor("the approval message", func() bool {
		for _, p := range fd.Posts {
			if len(p.CustomIDs) == 2 {
				ask = p
				return true
			}
		}
		return false
	})
	allow := ""
	for _, id := range ask.CustomIDs {
		if strings.HasSuffix(id, ":allow") {
			allow = id
		}
	}
	if !strings.Contains(ask.Content, "shell") || allow == "" {
		t.Fatalf("approval message %+v", ask)
	}
	// Over the Interactions Endpoint, a click signed by another key than
	// the application's is refused with 401 and answers nothing.
	var bound struct {
		Bindings []struct {
			BindingID string `json:"bindingId"`
		} `json:"bindings"`
	}
	if err := c.Call(ctx, "gateway.list", map[string]any{}, &bound); err != nil || len(bound.Bindings) != 1 {
		t.Fatalf("gateway.list: %v %+v", err, bound)
	}
	click, _ := json.Marshal(map[string]any{"id": "820000000000000001", "token": "itok", "type": 3, "channel_id": discordChannel,
		"data": map[string]any{"custom_id": allow, "component_type": 2}, "member": map[string]any{"user": map[string]any{"id": discordUser}}})
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	forger := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, ed25519.SeedSize))
	req, _ := http.NewRequest(http.MethodPost, "http://"+d.GatewayAddr()+"/v1/gateway/discord/"+bound.Bindings[0].BindingID+"/interactions", bytes.NewReader(click))
	req.Header.Set("X-Signature-Timestamp", ts)
	req.Header.Set("X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(forger, append([]byte(ts), click...))))
	resp, herr := http.DefaultClient.Do(req)
	if herr != nil {
		t.Fatal(herr)
	}
	resp.Body.Close()
	var pending struct {
		Requests []map[string]any `json:"requests"`
	}
	if err := c.Call(ctx, "approval.list", map[string]any{}, &pending); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusUnauthorized || len(pending.Requests) != 1 {
		t.Fatalf("a forged click: HTTP %d, %d requests pending; want 401 and the request still pending", resp.StatusCode, len(pending.Requests))
	}
	// The application's own key passes (Discord's PING of the URL).
	ping := []byte(`{"id":"820000000000000002","token":"ptok","type":1}`)
	req, _ = http.NewRequest(http.MethodPost, req.URL.String(), bytes.NewReader(ping))
	req.Header.Set("X-Signature-Timestamp", ts)
	req.Header.Set("X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(app, append([]byte(ts), ping...))))
	resp, herr = http.DefaultClient.Do(req)
	if herr != nil {
		t.Fatal(herr)
	}
	pong, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(pong), `"type":1`) {
		t.Fatalf("a signed PING: HTTP %d %s, want 200 {type: 1}", resp.StatusCode, pong)
	}
	fd.Click(discordChannel, ask.ID, allow, discordUser)
	discordReply(t, fd, m2, "That was the listing.")
	fd.WaitFor("the approval message names who allowed", func() bool {
		return strings.Contains(fd.LastContent(ask.ID), "Allowed by <@"+discordUser+">")
	})

	raw := map[string]any{}
	if err := c.Call(ctx, "gateway.list", map[string]any{}, &raw); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(raw)
	if bytes.Contains(b, []byte(discordToken)) || !strings.Contains(string(b), `"platform":"discord"`) || !strings.Contains(string(b), `"state":"active"`) {
		t.Fatalf("gateway.list: %s", b)
	}
	fd.Mu.Lock()
	if fd.BadAuth != 0 || len(fd.Identify) != 1 {
		t.Errorf("%d unauthorized requests, %d identifies", fd.BadAuth, len(fd.Identify))
	}
	fd.Mu.Unlock()
	d.Stop()
	if logText, _ := os.ReadFile(daemon.LogPath(home)); bytes.Contains(logText, []byte(discordToken)) {
		t.Fatal("the daemon log shows the bot token")
	}
}

// TestPostgresScaleOutGatewayDiscord: two daemons on one database. A
// Discord binding made through A has one gateway connection, on the
// daemon holding the binding's lease: a message is answered once. After a
// kill -9 of that daemon the other takes the lease over and resumes the
// gateway session where the store has it (op 6 with its session id and
// seq): the message dispatched meanwhile is replayed and answered, once,
// in the same conversation, and no new session is identified.
func TestPostgresScaleOutGatewayDiscord(t *testing.T) {
	fd := discordtest.New(t, discordToken)
	t.Setenv(gateway.DiscordAPIEnv, fd.API())
	t.Setenv("TRELLIS_E2E_DC_TOKEN", discordToken)
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
		"platform": "discord", "credentialsRef": "env:TRELLIS_E2E_DC_TOKEN", "channelId": discordChannel,
		"target": map[string]any{"newSession": map[string]any{"workdir": t.TempDir()}},
	}, &bound); err != nil {
		t.Fatalf("gateway.bind via A: %v", err)
	}
	scaleWaitFor(t, "B lists the binding made through A", func() bool {
		var res map[string]any
		if err := clients[1].Call(ctx, "gateway.list", map[string]any{}, &res); err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(res)
		return strings.Contains(string(raw), bound.BindingID)
	})
	fd.Live()
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
	// once waits for the reply to mid, then for the reply to a next message
	// of the channel: the binding's messages become turns of its session in
	// the order they arrive, so a second answer to mid would come first.
	once := func(mid string) {
		t.Helper()
		discordReply(t, fd, mid, "Hello from the scripted model")
		discordReply(t, fd, fd.Message(discordChannel, discordUser, "hello", false), "Hello from the scripted model")
		// and for the turns to end (their ends are stored after the last
		// edit of their replies): the kill below meets an idle session.
		scaleWaitFor(t, "the turns' ends", func() bool {
			var started, done int
			if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE kind = 'turn.started'), count(*) FILTER (WHERE kind = 'turn.done') FROM events`).Scan(&started, &done); err != nil {
				t.Fatal(err)
			}
			return done == started
		})
		fd.Mu.Lock()
		defer fd.Mu.Unlock()
		if n := len(fd.RepliesTo(mid)); n != 1 {
			t.Fatalf("message %s answered %d times", mid, n)
		}
	}
	m1 := fd.Message(discordChannel, discordUser, "hello", false)
	once(m1)
	if n, s := turns(); n != 2 || s != 1 {
		t.Fatalf("after one message and the next: %d turns in %d sessions, want 2 in 1", n, s)
	}
	fd.Mu.Lock()
	identified, seq := fd.Sessions, fd.Seq
	fd.Mu.Unlock()
	if identified != 1 {
		t.Fatalf("%d gateway sessions identified, want 1 (one connection for the two daemons)", identified)
	}

	h := holder()
	procs[h].kill()
	survivor := 1 - h
	m2 := fd.Message(discordChannel, discordUser, "hello again", false)
	once(m2)
	if n, s := turns(); n != 4 || s != 1 {
		t.Fatalf("after the takeover: %d turns in %d sessions, want 4 in 1 (the same conversation)", n, s)
	}
	if got := holder(); got != survivor {
		t.Fatalf("the lease is with daemon %d, want the survivor %d", got, survivor)
	}
	fd.Mu.Lock()
	defer fd.Mu.Unlock()
	if fd.Sessions != 1 || len(fd.Resumes) == 0 || fd.Resumes[0].SessionID != "fake-session-1" || fd.Resumes[0].Seq != seq {
		t.Fatalf("after the takeover: %d sessions identified, resumes %+v; want a resume of fake-session-1 at seq %d", fd.Sessions, fd.Resumes, seq)
	}
	t.Logf("2 daemons: 4 messages, 4 turns, 4 replies; the gateway session moved from daemon %d to %d after kill -9 (resumed at seq %d)", h, survivor, seq)
}
