package gateway

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/gateway/discordtest"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
)

const dcToken = "MTA5ODc2NTQzMjEw.fake-discord-bot-token"

const dcChannel = "600000000000000001"

// dcAppKey is the application's Ed25519 key (Discord signs interactions
// with its private half).
var dcAppKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))

// dcStreamSessions answers a prompt with "echo: <text>" streamed as three
// message.delta events through the real event log; the prompt "approve
// me" first asks the approval broker to run a shell command and answers
// how that went.
type dcStreamSessions struct {
	*fakeSessions
	broker *approval.Broker
}

func (f *dcStreamSessions) Prompt(ctx context.Context, id, text string, _ []session.Attachment, origin string) (string, error) {
	if origin != "" {
		return "", fmt.Errorf("gateway prompts must have no origin, got %q", origin)
	}
	f.mu.Lock()
	if f.prompts == nil {
		f.prompts = map[string][]string{}
	}
	f.prompts[id] = append(f.prompts[id], text)
	hook := f.onPrompt
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	turn := ids.New("t")
	go func() {
		bg := context.Background()
		_, _ = f.log.Append(bg, id, eventkind.TurnStarted, events.TurnStartedEvent{TurnID: turn, Prompt: text})
		answer := "echo: " + text
		if text == "approve me" {
			err := f.broker.Ask(bg, approval.Question{SessionID: id, Kind: "chat", TurnID: turn, CallID: "c1", Tool: "shell",
				Args: json.RawMessage(`{"command":"make clean"}`), Tag: approval.TagExec})
			answer = "ran make clean"
			if err != nil {
				answer = "not run: " + err.Error()
			}
		}
		third := len(answer) / 3
		for _, part := range []string{answer[:third], answer[third : 2*third], answer[2*third:]} {
			_, _ = f.log.Append(bg, id, eventkind.MessageDelta, events.MessageDeltaEvent{Text: part})
		}
		_, _ = f.log.Append(bg, id, eventkind.MessageDone, events.MessageDoneEvent{Text: answer, Role: "assistant"})
		_, _ = f.log.Append(bg, id, eventkind.TurnDone, events.TurnDoneEvent{TurnID: turn, Reason: events.TurnDoneReasonComplete})
	}()
	return turn, nil
}

func (f *dcStreamSessions) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, ps := range f.prompts {
		n += len(ps)
	}
	return n
}

// startDiscord starts a gateway with a Discord binding of dcChannel (and
// userID, when given) against fd.
func startDiscord(t *testing.T, fd *discordtest.Fake, userID string) (*Service, *dcStreamSessions, *approval.Broker, string) {
	t.Helper()
	f := newFixture(t)
	broker := approval.NewBroker(f.st, func(string) string { return "" }, slog.Default(), approval.BrokerOptions{Timeout: time.Minute})
	t.Cleanup(broker.Close)
	ss := &dcStreamSessions{fakeSessions: f.ss, broker: broker}
	s, err := New(context.Background(), Deps{Settings: f.st, Sessions: ss, Events: f.log, Approvals: broker}, Options{
		Home: f.home, Workdir: f.home, Getenv: func(k string) string {
			return map[string]string{"DISCORD_BOT_TOKEN": dcToken, "DISCORD_PUBLIC_KEY": hex.EncodeToString(dcAppKey.Public().(ed25519.PublicKey))}[k]
		},
		Discord: DiscordOptions{API: fd.API(), EditInterval: 50 * time.Millisecond, ReidentifyDelay: 10 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	id, err := s.Bind(context.Background(), BindParams{Platform: PlatformDiscord, CredentialsRef: "discord",
		Target: Target{NewSession: &NewSessionTarget{Workdir: f.home}}, ChannelID: dcChannel, UserID: userID})
	if err != nil {
		t.Fatal(err)
	}
	return s, ss, broker, id
}

// waitReply waits for the gateway.event reply to message mid.
func waitReply(t *testing.T, w *Watch, mid string) map[string]any {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev := <-w.Events():
			if ev.Kind == EventError {
				t.Logf("gateway error event: %v", ev.Payload)
			}
			if ev.Kind == EventReply && ev.Payload["messageId"] == mid {
				return ev.Payload
			}
		case <-deadline:
			t.Fatalf("no reply to message %s within 20 s", mid)
		}
	}
}

// TestDiscordMessageStreamsAnswer: a message of the bound channel becomes
// a turn of the channel's session; the streamed answer is posted as a
// reply at its first text and edited to the whole answer. The bot
// identified with its token and the three intents; messages of bots, of
// itself and of other channels are not answered.
func TestDiscordMessageStreamsAnswer(t *testing.T) {
	fd := discordtest.New(t, dcToken)
	s, ss, _, _ := startDiscord(t, fd, "")
	w := s.Watch(context.Background())
	fd.Live()
	fd.Message(dcChannel, discordtest.BotID, "my own message", true)
	fd.Message(dcChannel, "500000000000000002", "another bot", true)
	fd.Message("600000000000000099", "500000000000000001", "another channel", false)
	mid := fd.Message(dcChannel, "500000000000000001", "hello there", false)
	rep := waitReply(t, w, mid)
	if rep["text"] != "echo: hello there" {
		t.Fatalf("reply event %v", rep)
	}
	fd.Mu.Lock()
	defer fd.Mu.Unlock()
	replies := fd.RepliesTo(mid)
	if len(replies) != 1 {
		t.Fatalf("replies %+v, want one post replying to %s", replies, mid)
	}
	first := replies[0]
	if first.Channel != dcChannel || first.Content == "echo: hello there" || !strings.HasPrefix("echo: hello there", first.Content) {
		t.Fatalf("first post %+v: want a prefix of the answer (the stream's first text)", first)
	}
	if len(fd.Edits) == 0 || fd.LastContent(first.ID) != "echo: hello there" {
		t.Fatalf("edits %+v: want the reply edited to the whole answer", fd.Edits)
	}
	if len(fd.Posts) != 1 {
		t.Fatalf("posts %+v: only the one reply", fd.Posts)
	}
	if n := ss.count(); n != 1 {
		t.Fatalf("prompts %v, want one", ss.prompts)
	}
	if len(fd.Identify) != 1 || fd.Identify[0]["intents"] != float64(DiscordIntents) || fd.Identify[0]["token"] != dcToken {
		t.Fatalf("identify %v", fd.Identify)
	}
	if DiscordIntents != 37376 {
		t.Fatalf("intents %d, want GUILD_MESSAGES|DIRECT_MESSAGES|MESSAGE_CONTENT = 37376", DiscordIntents)
	}
	if fd.BadAuth != 0 {
		t.Fatalf("%d requests without the bot's Authorization", fd.BadAuth)
	}
	for _, b := range s.List(context.Background()) {
		if b.State != StateActive {
			t.Fatalf("binding %+v", b)
		}
	}
}

// TestDiscordApprovalButton: a turn's approval request is posted to the
// channel with Allow and Deny buttons; a click by a user the binding does
// not accept is refused with an ephemeral answer and answers nothing, the
// bound user's click answers the request as discord:<user id>, the
// interaction is acknowledged (type 6), the message shows who answered,
// and the turn goes on.
func TestDiscordApprovalButton(t *testing.T) {
	const user, other = "500000000000000001", "500000000000000666"
	for _, decision := range []string{approval.DecisionAllow, approval.DecisionDeny} {
		t.Run(decision, func(t *testing.T) {
			fd := discordtest.New(t, dcToken)
			s, _, broker, _ := startDiscord(t, fd, user)
			resolved := broker.Watch(t.Context())
			w := s.Watch(context.Background())
			fd.Live()
			mid := fd.Message(dcChannel, user, "approve me", false)
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
			if !strings.Contains(ask.Content, "shell") || !strings.Contains(ask.Content, "make clean") {
				t.Fatalf("approval message %q", ask.Content)
			}
			var button string
			for _, c := range ask.CustomIDs {
				if strings.HasSuffix(c, ":"+decision) {
					button = c
				}
			}
			iid, _ := fd.Click(dcChannel, ask.ID, button, other)
			fd.WaitFor("the refusal of the other user's click", func() bool {
				for _, c := range fd.Callbacks {
					if c.ID == iid {
						return true
					}
				}
				return false
			})
			fd.Mu.Lock()
			refusal := fd.Callbacks[len(fd.Callbacks)-1].Body
			fd.Mu.Unlock()
			if refusal["type"] != float64(4) || refusal["data"].(map[string]any)["flags"] != float64(64) {
				t.Fatalf("refusal %v: want an ephemeral message (type 4, flags 64)", refusal)
			}
			if n := len(broker.ListAll("")); n != 1 {
				t.Fatalf("%d pending after the other user's click, want 1", n)
			}
			iid, tok := fd.Click(dcChannel, ask.ID, button, user)
			rep := waitReply(t, w, mid)
			want := "ran make clean"
			if decision == approval.DecisionDeny {
				want = "not run: shell was denied by discord:" + user
			}
			if !strings.HasPrefix(rep["text"].(string), want) {
				t.Fatalf("reply %v, want %q", rep, want)
			}
			for ev := range resolved {
				if ev.Resolved == nil {
					continue
				}
				if ev.Resolved.By != "discord:"+user || ev.Resolved.Decision != decision || !strings.Contains(ev.Resolved.Reason, user) {
					t.Fatalf("resolution %+v: want %s by discord:%s", ev.Resolved, decision, user)
				}
				break
			}
			fd.Mu.Lock()
			defer fd.Mu.Unlock()
			// Edited before the answer is: the buttons are gone once the turn is.
			if got := fd.LastContent(ask.ID); !strings.Contains(got, "by <@"+user+">") {
				t.Fatalf("the approval message shows %q, want who answered", got)
			}
			var ack *discordtest.Callback
			for i, c := range fd.Callbacks {
				if c.ID == iid {
					ack = &fd.Callbacks[i]
				}
			}
			if ack == nil || ack.Token != tok || ack.Body["type"] != float64(6) {
				t.Fatalf("callbacks %+v: want type 6 for interaction %s", fd.Callbacks, iid)
			}
		})
	}
}

// TestDiscordResume: the connection ends in each of the ways Discord ends
// it; the gateway resumes (op 6 with the session id and the last seq, at
// the resume URL) or identifies again, and each message is answered once:
// the one answered before the break is not answered again even when the
// replay includes it, the one dispatched during the break is answered
// after the resume.
func TestDiscordResume(t *testing.T) {
	const user = "500000000000000001"
	for _, tc := range []struct {
		name     string
		brk      func(fd *discordtest.Fake)
		resume   bool // a Resume, else a new Identify
		sloppy   bool // the server replays everything
		during   bool // a message is dispatched during the break (replayed)
		sessions int
	}{
		{"reconnect (op 7)", func(fd *discordtest.Fake) { fd.Drop(7, false) }, true, false, true, 1},
		{"connection dropped", func(fd *discordtest.Fake) { fd.Drop(0, false) }, true, false, true, 1},
		{"invalid session, resumable (op 9 true)", func(fd *discordtest.Fake) { fd.Drop(9, true) }, true, false, true, 1},
		{"invalid session (op 9 false)", func(fd *discordtest.Fake) { fd.Drop(9, false) }, false, false, false, 2},
		{"heartbeat not acknowledged", func(fd *discordtest.Fake) {
			fd.Update(func() { fd.NoAck = true })
		}, true, false, false, 1},
		{"replay of the answered message", func(fd *discordtest.Fake) { fd.Drop(7, false) }, true, true, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd := discordtest.New(t, dcToken)
			fd.Sloppy = tc.sloppy
			s, ss, _, _ := startDiscord(t, fd, "")
			w := s.Watch(context.Background())
			fd.Live()
			m1 := fd.Message(dcChannel, user, "first", false)
			waitReply(t, w, m1)
			fd.Mu.Lock()
			seqBefore := fd.Seq
			fd.Mu.Unlock()
			tc.brk(fd)
			var m2 string
			if tc.during {
				m2 = fd.Message(dcChannel, user, "second", false)
			}
			if tc.resume {
				fd.WaitFor("a resume", func() bool { return len(fd.Resumes) > 0 && fd.Conn != nil })
			} else {
				fd.WaitFor("a new session", func() bool { return fd.Sessions == tc.sessions && fd.Conn != nil })
			}
			if !tc.during {
				m2 = fd.Message(dcChannel, user, "second", false)
			}
			waitReply(t, w, m2)
			fd.Mu.Lock()
			defer fd.Mu.Unlock()
			if tc.resume {
				r := fd.Resumes[0]
				if r.Path != "/resume" || r.SessionID != "fake-session-1" || r.Seq != seqBefore {
					t.Fatalf("resume %+v, want at /resume, fake-session-1, seq %d", r, seqBefore)
				}
			}
			if fd.Sessions != tc.sessions {
				t.Fatalf("%d sessions identified, want %d", fd.Sessions, tc.sessions)
			}
			if n1, n2 := len(fd.RepliesTo(m1)), len(fd.RepliesTo(m2)); n1 != 1 || n2 != 1 {
				t.Fatalf("replies to the messages: %d and %d, want one each", n1, n2)
			}
			if n := ss.count(); n != 2 {
				t.Fatalf("prompts %v, want two", ss.prompts)
			}
		})
	}
}

// TestDiscordRateLimit: a 429 on posting the reply (of the route's bucket
// or global) is waited out for its retry_after and the reply is posted
// once; the time between the refused attempt and the next is at least
// retry_after.
func TestDiscordRateLimit(t *testing.T) {
	for _, global := range []bool{false, true} {
		t.Run(fmt.Sprintf("global=%v", global), func(t *testing.T) {
			fd := discordtest.New(t, dcToken)
			fd.Limit = []discordtest.Limit{{RetryAfter: 0.3, Global: global}}
			s, _, _, _ := startDiscord(t, fd, "")
			w := s.Watch(context.Background())
			fd.Live()
			mid := fd.Message(dcChannel, "500000000000000001", "hi", false)
			waitReply(t, w, mid)
			fd.Mu.Lock()
			defer fd.Mu.Unlock()
			if len(fd.Attempts) < 2 {
				t.Fatalf("%d attempts, want the refused one and its retry", len(fd.Attempts))
			}
			if gap := fd.Attempts[1].Sub(fd.Attempts[0]); gap < 300*time.Millisecond {
				t.Fatalf("retried after %v, before retry_after (300ms)", gap)
			}
			if n := len(fd.RepliesTo(mid)); n != 1 {
				t.Fatalf("%d replies, want one", n)
			}
		})
	}
}

// TestDiscordBindValidation: ids that are not snowflakes are invalid.
func TestDiscordBindValidation(t *testing.T) {
	f := newFixture(t)
	f.env["DISCORD_BOT_TOKEN"] = dcToken
	s := f.start(t, Options{Discord: DiscordOptions{API: "http://127.0.0.1:1"}})
	for _, tc := range []struct{ channel, user, field string }{
		{"general", "", "channelId"},
		{dcChannel, "@alice", "userId"},
	} {
		_, err := s.Bind(context.Background(), BindParams{Platform: PlatformDiscord, CredentialsRef: "discord",
			Target: Target{Agent: "reviewer"}, ChannelID: tc.channel, UserID: tc.user})
		if !errs.Is(err, errcode.InvalidParams) || !strings.Contains(err.Error(), tc.field) {
			t.Fatalf("bind %s/%s: %v, want invalid_params naming %s", tc.channel, tc.user, err, tc.field)
		}
	}
}

// TestDiscordBadToken: a token Discord refuses puts the binding in state
// error saying so, without the token.
func TestDiscordBadToken(t *testing.T) {
	fd := discordtest.New(t, "another-token")
	s, _, _, id := startDiscord(t, fd, "")
	deadline := time.Now().Add(20 * time.Second)
	for {
		var b Binding
		for _, x := range s.List(context.Background()) {
			if x.BindingID == id {
				b = x
			}
		}
		if b.State == StateError {
			if !strings.Contains(b.LastError, "401") || strings.Contains(b.LastError, dcToken) {
				t.Fatalf("lastError %q", b.LastError)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("binding %+v, want state error", b)
		}
		time.Sleep(10 * time.Millisecond) // the binding's state has no change signal: polled
	}
}

// TestDiscordRefusedGivesLeaseBack: on a store daemons share, a bot
// Discord refuses for good (here its token) gives the binding's lease back
// as the binding goes to state error, and that daemon does not claim it
// again at its refreshes; another daemon tries it once, gives it back too,
// and the lease stays free.
func TestDiscordRefusedGivesLeaseBack(t *testing.T) {
	fd := discordtest.New(t, "another-token")
	f := newFixture(t)
	ctx := context.Background()
	for _, id := range []string{"d-a", "d-b"} {
		if err := f.st.RegisterDaemon(ctx, store.Daemon{ID: id, GRPCAddr: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	start := func(daemonID string) (*Service, *cluster.Node) {
		node := cluster.New(cluster.Options{Store: f.st, DaemonID: daemonID, GRPCAddr: "127.0.0.1:1", Lease: time.Minute})
		s, err := New(ctx, Deps{Settings: f.st, Sessions: f.ss, Events: f.log, Leases: node}, Options{
			Home: f.home, Workdir: f.home, Getenv: func(string) string { return dcToken },
			Discord: DiscordOptions{API: fd.API()},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s, node
	}
	// refused waits for the binding's state error on s, then checks that
	// node holds no lease of it and does not take it again.
	refused := func(s *Service, node *cluster.Node, id string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; {
			var b Binding
			for _, x := range s.List(ctx) {
				if x.BindingID == id {
					b = x
				}
			}
			if b.State == StateError {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("binding %+v, want state error", b)
			}
			time.Sleep(10 * time.Millisecond) // the binding's state has no change signal: polled
		}
		if node.Holds(leaseKey(id)) {
			t.Fatalf("the daemon Discord refused still holds %s", leaseKey(id))
		}
		fd.Mu.Lock()
		tries := fd.BadAuth
		fd.Mu.Unlock()
		s.refresh(ctx)
		fd.Mu.Lock()
		again := fd.BadAuth
		fd.Mu.Unlock()
		if node.Holds(leaseKey(id)) || again != tries {
			t.Fatalf("after a refresh: lease held %v, %d more requests to Discord; want neither", node.Holds(leaseKey(id)), again-tries)
		}
	}

	a, nodeA := start("d-a")
	id, err := a.Bind(ctx, BindParams{Platform: PlatformDiscord, CredentialsRef: "env:DC", Target: Target{NewSession: &NewSessionTarget{Workdir: f.home}}, ChannelID: dcChannel})
	if err != nil {
		t.Fatal(err)
	}
	refused(a, nodeA, id)
	b, nodeB := start("d-b")
	refused(b, nodeB, id)
	if got, err := cluster.New(cluster.Options{Store: f.st, DaemonID: "d-c", GRPCAddr: "127.0.0.1:1", Lease: time.Minute}).AcquireResource(ctx, leaseKey(id), nil); err != nil || !got {
		t.Fatalf("a third daemon takes the lease: %v, %v; want it free", got, err)
	}
}

// TestDiscordHTTPInteractions: the Interactions Endpoint takes a click
// signed with the application's key (Ed25519 over timestamp + body) and
// answers the approval; a request without a signature, signed by another
// key, altered after signing, or signed too long ago is refused with 401
// and answers nothing; PING is answered with PONG.
func TestDiscordHTTPInteractions(t *testing.T) {
	const user = "500000000000000001"
	fd := discordtest.New(t, dcToken)
	s, _, broker, id := startDiscord(t, fd, "")
	w := s.Watch(context.Background())
	fd.Live()
	mid := fd.Message(dcChannel, user, "approve me", false)
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
	click, _ := json.Marshal(map[string]any{"id": "810000000000000001", "token": "itok", "type": 3, "channel_id": dcChannel,
		"data": map[string]any{"custom_id": ask.CustomIDs[0], "component_type": 2}, "message": map[string]any{"id": ask.ID},
		"member": map[string]any{"user": map[string]any{"id": user, "username": "alice"}}})
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize))
	sign := func(key ed25519.PrivateKey, ts string, body []byte) http.Header {
		h := http.Header{}
		h.Set("X-Signature-Timestamp", ts)
		h.Set("X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(key, append([]byte(ts), body...))))
		return h
	}
	now := strconv.FormatInt(time.Now().Unix(), 10)
	post := func(binding string, h http.Header, body []byte) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.Addr()+"/v1/gateway/discord/"+binding+"/interactions", bytes.NewReader(body))
		req.Header = h
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		return resp.StatusCode, out
	}
	for _, tc := range []struct {
		name    string
		binding string
		h       http.Header
		body    []byte
		code    int
	}{
		{"no signature", id, http.Header{}, click, 401},
		{"another key", id, sign(other, now, click), click, 401},
		{"altered body", id, sign(dcAppKey, now, click), bytes.Replace(click, []byte(user), []byte("500000000000000666"), 1), 401},
		{"stale timestamp", id, sign(dcAppKey, strconv.FormatInt(time.Now().Add(-10*time.Minute).Unix(), 10), click), click, 401},
		{"unknown binding", "b-none", sign(dcAppKey, now, click), click, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := post(tc.binding, tc.h, tc.body)
			if code != tc.code {
				t.Fatalf("HTTP %d %v, want %d", code, out, tc.code)
			}
			if n := len(broker.ListAll("")); n != 1 {
				t.Fatalf("%d requests pending, want the one still pending", n)
			}
		})
	}
	ping := []byte(`{"id":"810000000000000002","token":"ptok","type":1}`)
	if code, out := post(id, sign(dcAppKey, now, ping), ping); code != 200 || out["type"] != float64(1) {
		t.Fatalf("PING: HTTP %d %v, want 200 {type: 1}", code, out)
	}
	resolved := broker.Watch(t.Context())
	if code, out := post(id, sign(dcAppKey, now, click), click); code != 200 || out["type"] != float64(6) {
		t.Fatalf("signed click: HTTP %d %v, want 200 {type: 6}", code, out)
	}
	for ev := range resolved {
		if ev.Resolved != nil {
			if ev.Resolved.By != "discord:"+user {
				t.Fatalf("resolution %+v, want by discord:%s", ev.Resolved, user)
			}
			break
		}
	}
	if rep := waitReply(t, w, mid); rep["text"] != "ran make clean" && !strings.HasPrefix(rep["text"].(string), "not run") {
		t.Fatalf("reply %v", rep)
	}
}

// FuzzDiscordPayload: the gateway payload parser never panics, and what it
// accepts is consistent with its opcode.
func FuzzDiscordPayload(f *testing.F) {
	for _, s := range []string{
		`{"op":10,"d":{"heartbeat_interval":41250}}`,
		`{"op":11}`, `{"op":1,"d":null}`, `{"op":7,"d":null}`, `{"op":9,"d":true}`, `{"op":9,"d":false}`,
		`{"op":0,"s":1,"t":"READY","d":{"v":10,"session_id":"abc","resume_gateway_url":"wss://x","user":{"id":"1"}}}`,
		`{"op":0,"s":2,"t":"MESSAGE_CREATE","d":{"id":"10","channel_id":"20","content":"hi","author":{"id":"3"}}}`,
		`{"op":0,"s":3,"t":"INTERACTION_CREATE","d":{"id":"1","token":"t","type":3,"data":{"custom_id":"trellis:ap:x:allow"},"member":{"user":{"id":"5"}}}}`,
		`{"op":0,"t":"MESSAGE_CREATE","d":{}}`, `{"op":10,"d":{"heartbeat_interval":-1}}`, `[]`, `{}`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ev, err := parseDiscordPayload(raw)
		if err != nil {
			return
		}
		switch {
		case ev.Op == dcOpHello && ev.Interval <= 0:
			t.Fatalf("Hello with interval %v accepted", ev.Interval)
		case ev.Op == dcOpDispatch && ev.Seq == nil:
			t.Fatal("a dispatch without s accepted")
		case ev.Message != nil && (!isSnowflake(ev.Message.ID) || !isSnowflake(ev.Message.ChannelID)):
			t.Fatalf("message %+v accepted", ev.Message)
		case ev.Interaction != nil && (ev.Interaction.ID == "" || ev.Interaction.Token == ""):
			t.Fatalf("interaction %+v accepted", ev.Interaction)
		case ev.Ready != nil && ev.Ready.SessionID == "":
			t.Fatal("READY without a session id accepted")
		}
	})
}

// FuzzDiscordSignature: whatever the headers and body, verification never
// panics, and only the application key's signature of timestamp + body
// passes.
func FuzzDiscordSignature(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	body := []byte(`{"type":1}`)
	f.Add(ts, hex.EncodeToString(ed25519.Sign(dcAppKey, append([]byte(ts), body...))), body)
	f.Add("", "", []byte{})
	f.Add("-1", "zz", []byte("{}"))
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set("X-Signature-Timestamp", ts)
		h.Set("X-Signature-Ed25519", sig)
		err := verifyDiscord(dcAppKey.Public().(ed25519.PublicKey), h, body, now)
		if err != nil {
			return
		}
		raw, _ := hex.DecodeString(sig)
		if !ed25519.Verify(dcAppKey.Public().(ed25519.PublicKey), append([]byte(h.Get("X-Signature-Timestamp")), body...), raw) {
			t.Fatalf("accepted a signature that does not verify: ts %q sig %q", ts, sig)
		}
	})
}

// FuzzDiscordRetry: a 429's body and headers never panic the parser and
// give a wait between 0 and an hour.
func FuzzDiscordRetry(f *testing.F) {
	f.Add(`{"message":"You are being rate limited.","retry_after":0.3,"global":false}`, "1", "user")
	f.Add(`{"retry_after":-5}`, "abc", "global")
	f.Add(`[]`, "1e308", "")
	f.Fuzz(func(t *testing.T, body, retryAfter, scope string) {
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		h.Set("X-RateLimit-Scope", scope)
		d, _ := parseRetry(h, []byte(body))
		if d < 0 || d > time.Hour {
			t.Fatalf("wait %v for body %q, Retry-After %q", d, body, retryAfter)
		}
	})
}
