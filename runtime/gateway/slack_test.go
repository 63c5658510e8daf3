package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/gateway/slacktest"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
)

const (
	slackBot     = "xoxb-1111-2222-slack-bot-token-value"
	slackApp     = "xapp-1-A0001-3333-slack-app-token-value"
	slackSigning = "8f742231b10e8888abcd99yyyzzz85a5"
)

// streamSessions answers a prompt as fakeSessions does, but streamed: a
// message.delta of "echo: " (or "ran: "), then one of the rest, then
// message.done. A prompt "run CMD" first asks the approval broker to run
// the shell command CMD and answers "ran: CMD" or "denied: ...". gate, when
// set, runs between the two deltas.
type streamSessions struct {
	*fakeSessions
	broker *approval.Broker
	gate   func(text string)
}

func (f *streamSessions) Prompt(ctx context.Context, id, text string, _ []session.Attachment, origin string) (string, error) {
	if origin != "" {
		return "", errors.New("gateway prompts must have no origin")
	}
	f.mu.Lock()
	if f.prompts == nil {
		f.prompts = map[string][]string{}
	}
	f.prompts[id] = append(f.prompts[id], text)
	f.mu.Unlock()
	turn := ids.New("t")
	go func() {
		bg := context.Background()
		_, _ = f.log.Append(bg, id, eventkind.TurnStarted, events.TurnStartedEvent{TurnID: turn, Prompt: text})
		if text == "fail" {
			_, _ = f.log.Append(bg, id, eventkind.Error, events.ErrorEvent{Code: "provider_error", Message: "the model is down"})
			_, _ = f.log.Append(bg, id, eventkind.TurnDone, events.TurnDoneEvent{TurnID: turn, Reason: events.TurnDoneReasonError})
			return
		}
		head, rest := "echo: ", text
		if cmd, ok := strings.CutPrefix(text, "run "); ok && f.broker != nil {
			args, _ := json.Marshal(map[string]string{"command": cmd})
			err := f.broker.Ask(bg, approval.Question{SessionID: id, Kind: store.KindChat, TurnID: turn, CallID: "call-1", Tool: "shell", Args: args, Tag: approval.TagExec})
			head, rest = "ran: ", cmd
			if err != nil {
				head, rest = "denied: ", err.Error()
			}
		}
		_, _ = f.log.Append(bg, id, eventkind.MessageDelta, events.MessageDeltaEvent{Text: head})
		if f.gate != nil {
			f.gate(text)
		}
		_, _ = f.log.Append(bg, id, eventkind.MessageDelta, events.MessageDeltaEvent{Text: rest})
		_, _ = f.log.Append(bg, id, eventkind.MessageDone, events.MessageDoneEvent{Text: head + rest, Role: "assistant"})
		_, _ = f.log.Append(bg, id, eventkind.TurnDone, events.TurnDoneEvent{TurnID: turn, Reason: events.TurnDoneReasonComplete})
	}()
	return turn, nil
}

// startSlack starts a service on f's store with the streaming sessions
// and the broker (nil: none) against the fake Slack.
func startSlack(t *testing.T, f *fixture, ss *streamSessions, fs *slacktest.Fake) *Service {
	t.Helper()
	deps := Deps{Settings: f.st, Sessions: ss, Events: f.log}
	if ss.broker != nil {
		deps.Approvals = ss.broker
	}
	s, err := New(context.Background(), deps, Options{
		Home: f.home, Workdir: f.home, Getenv: func(k string) string { return f.env[k] },
		SlackAPI: fs.API(), SlackUpdateInterval: time.Hour, // one edit: the last
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// allPrompts returns the prompts of every session, in no session order.
func (f *fakeSessions) allPrompts() map[string][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]string{}
	for k, v := range f.prompts {
		out[k] = slices.Clone(v)
	}
	return out
}

// TestSlackEventsAPI: an Events API binding checks each request's
// signature and timestamp (401 and nothing runs otherwise), answers the
// URL verification challenge, and answers a message once — its retry and
// its app_mention twin are taken as the same message — by posting the
// first chunk into the message's thread (waiting out an HTTP 429) and
// editing it to the whole answer; a reply in the thread continues the
// conversation's session; bot messages are not answered.
func TestSlackEventsAPI(t *testing.T) {
	f := newFixture(t)
	writeSecret(t, f.home, "slack", "# the Slack app's credentials\nbot_token="+slackBot+"\nsigning_secret="+slackSigning, 0o600)
	fs := slacktest.New(t, slackBot, slackApp)
	fs.Limit("chat.postMessage", 1)
	release := make(chan struct{})
	ss := &streamSessions{fakeSessions: f.ss, gate: func(text string) {
		if text == "hello there" {
			<-release
		}
	}}
	s := startSlack(t, f, ss, fs)
	ctx := context.Background()
	id, err := s.Bind(ctx, BindParams{Platform: PlatformSlack, CredentialsRef: "slack", Target: Target{Agent: "reviewer"}})
	if err != nil {
		t.Fatal(err)
	}
	addr, now := s.Addr(), time.Now()
	msg := slacktest.Event("Ev01", "message", "C0001", "U0001", "hello there", "1700000000.000100", "")

	// Refused before anything runs: bad key, stale or future timestamp, no signature.
	for _, tc := range []struct {
		name string
		key  string
		at   time.Time
		hdr  map[string]string
	}{
		{"wrong signing secret", "not-the-secret", now, nil},
		{"six minutes old", slackSigning, now.Add(-6 * time.Minute), nil},
		{"six minutes ahead", slackSigning, now.Add(6 * time.Minute), nil},
		{"no signature", slackSigning, now, map[string]string{SlackSignatureHeader: ""}},
		{"signature of another body", slackSigning, now, map[string]string{SlackSignatureHeader: SlackSign(slackSigning, "1", []byte("{}"))}},
	} {
		code, body := slacktest.Request(t, addr, id, tc.key, tc.at, msg, false, tc.hdr)
		if code != http.StatusUnauthorized {
			t.Fatalf("%s: %d %s, want 401", tc.name, code, body)
		}
	}
	if code, _ := slacktest.Request(t, addr, "b-nope", slackSigning, now, msg, false, nil); code != http.StatusNotFound {
		t.Fatalf("unknown binding: %d", code)
	}
	code, body := slacktest.Request(t, addr, id, slackSigning, now, map[string]any{"token": "x", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"}, false, nil)
	var ch map[string]string
	if code != http.StatusOK || json.Unmarshal(body, &ch) != nil || ch["challenge"] != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
		t.Fatalf("url_verification: %d %s", code, body)
	}

	// The message, Slack's retry of it, and the app_mention of the same message.
	for _, req := range []struct {
		body map[string]any
		hdr  map[string]string
	}{
		{msg, nil},
		{msg, map[string]string{SlackRetryHeader: "1", "X-Slack-Retry-Reason": "http_timeout"}},
		{slacktest.Event("Ev02", "app_mention", "C0001", "U0001", "<@UBOT01> hello there", "1700000000.000100", ""), nil},
	} {
		if code, body := slacktest.Request(t, addr, id, slackSigning, time.Now(), req.body, false, req.hdr); code != http.StatusOK {
			t.Fatalf("event: %d %s", code, body)
		}
	}
	first := fs.Next(t)
	if first.Method != "chat.postMessage" || first.Body["channel"] != "C0001" || first.Body["thread_ts"] != "1700000000.000100" || first.Body["text"] != "echo: " {
		t.Fatalf("first post %+v, want the first chunk posted in the message's thread", first)
	}
	if m := fs.Methods(); m[0] != "chat.postMessage (429)" {
		t.Fatalf("calls %v, want the post retried after its 429", m)
	}
	close(release)
	edit := fs.Next(t)
	if edit.Method != "chat.update" || edit.TS != first.TS || edit.Body["channel"] != "C0001" || edit.Body["text"] != "echo: hello there" {
		t.Fatalf("edit %+v, want the first post edited to the whole answer", edit)
	}

	// A reply in the thread: the same conversation. A bot's message: ignored.
	bot := slacktest.Event("Ev03", "message", "C0001", "", "beep", "1700000000.000300", "")
	bot["event"].(map[string]any)["bot_id"] = "B0001"
	bot["event"].(map[string]any)["subtype"] = "bot_message"
	for _, b := range []map[string]any{bot, slacktest.Event("Ev04", "message", "C0001", "U0002", "more", "1700000000.000400", "1700000000.000100")} {
		if code, body := slacktest.Request(t, addr, id, slackSigning, time.Now(), b, false, nil); code != http.StatusOK {
			t.Fatalf("event: %d %s", code, body)
		}
	}
	last := fs.Until(t, "a post", func(c slacktest.Call) bool { return c.Body["text"] == "echo: more" })
	if last.Body["channel"] != "C0001" || (last.Method == "chat.postMessage" && last.Body["thread_ts"] != "1700000000.000100") {
		t.Fatalf("reply in the thread %+v", last)
	}
	if raw, _ := json.Marshal(s.List(ctx)); strings.Contains(string(raw), slackBot) || strings.Contains(string(raw), slackSigning) {
		t.Fatal("gateway.list shows a Slack credential")
	}

	s.Close() // every request's work is done
	prompts := f.ss.allPrompts()
	if len(prompts) != 1 || len(f.ss.created) != 1 {
		t.Fatalf("sessions %v, want one conversation", prompts)
	}
	for _, p := range prompts {
		if !slices.Equal(p, []string{"hello there", "more"}) {
			t.Fatalf("prompts %v, want the message once and the reply", p)
		}
	}
	if n := fs.Count("chat.postMessage"); n != 2 {
		t.Fatalf("%d posts (%v), want one per answered message", n, fs.Methods())
	}
}

// TestSlackApprovalButton: an approval request of a conversation's turn is
// posted into its thread with Allow and Deny buttons; a click with a bad
// signature answers nothing; a signed click (an interactive block_actions
// payload) allows it as the clicking user, the message is edited to say
// who, and the turn goes on to its answer.
func TestSlackApprovalButton(t *testing.T) {
	f := newFixture(t)
	f.env["SLACK_SIGNING_SECRET"] = slackSigning
	f.env["SLACK_BOT"] = slackBot
	fs := slacktest.New(t, slackBot, slackApp)
	broker := approval.NewBroker(f.st, nil, nil, approval.BrokerOptions{})
	t.Cleanup(broker.Close)
	ss := &streamSessions{fakeSessions: f.ss, broker: broker}
	s := startSlack(t, f, ss, fs)
	ctx := context.Background()
	// A bare bot token: the signing secret comes from the environment.
	id, err := s.Bind(ctx, BindParams{Platform: PlatformSlack, CredentialsRef: "env:SLACK_BOT", Mode: SlackModeEvents, Target: Target{NewSession: &NewSessionTarget{Workdir: f.home}}, ChannelID: "C0009"})
	if err != nil {
		t.Fatal(err)
	}
	resolved := broker.Watch(t.Context())
	if code, body := slacktest.Request(t, s.Addr(), id, slackSigning, time.Now(), slacktest.Event("Ev10", "app_mention", "C0009", "U0001", "<@UBOT01> run ls -la", "1700000001.000100", ""), false, nil); code != http.StatusOK {
		t.Fatalf("event: %d %s", code, body)
	}
	ask := fs.Next(t)
	blocks, _ := ask.Body["blocks"].([]any)
	if ask.Method != "chat.postMessage" || ask.Body["thread_ts"] != "1700000001.000100" || len(blocks) != 2 {
		t.Fatalf("approval post %+v, want a Block Kit message in the thread", ask)
	}
	actions := blocks[1].(map[string]any)
	elems, _ := actions["elements"].([]any)
	if actions["type"] != "actions" || len(elems) != 2 {
		t.Fatalf("actions block %v", actions)
	}
	allow := elems[0].(map[string]any)
	reqID, _ := allow["value"].(string)
	if allow["type"] != "button" || allow["action_id"] != slackActionAllow || !strings.HasPrefix(reqID, "ap-") {
		t.Fatalf("allow button %v", allow)
	}
	if !strings.Contains(blocks[0].(map[string]any)["text"].(map[string]any)["text"].(string), "ls -la") {
		t.Fatalf("the request's text does not show the command: %v", blocks[0])
	}

	click := slacktest.BlockActions("U0777", "C0009", slackActionAllow, reqID)
	if code, _ := slacktest.Request(t, s.Addr(), id, "forged", time.Now(), click, true, nil); code != http.StatusUnauthorized {
		t.Fatalf("forged click: %d, want 401", code)
	}
	if n := len(broker.List("", "")); n != 1 {
		t.Fatalf("%d pending after a forged click, want 1", n)
	}
	if code, body := slacktest.Request(t, s.Addr(), id, slackSigning, time.Now(), click, true, nil); code != http.StatusOK {
		t.Fatalf("click: %d %s", code, body)
	}
	for done := false; !done; {
		select {
		case ev := <-resolved:
			r := ev.Resolved
			if r == nil {
				continue // the request's approval.pending
			}
			if r.RequestID != reqID || r.Decision != approval.DecisionAllow || r.By != "slack:U0777" || !strings.Contains(r.Reason, "U0777") {
				t.Fatalf("resolution %+v, want an allow by slack:U0777", r)
			}
			done = true
		case <-time.After(15 * time.Second):
			t.Fatal("the click answered nothing")
		}
	}
	var sawOutcome, sawAnswer bool
	for !sawOutcome || !sawAnswer {
		c := fs.Next(t)
		switch {
		case c.Method == "chat.update" && c.TS == ask.TS:
			if !strings.Contains(c.Body["text"].(string), "Allowed by <@U0777>") {
				t.Fatalf("outcome %v", c.Body)
			}
			sawOutcome = true
		case c.Body["text"] == "ran: ls -la":
			sawAnswer = true
		}
	}
	// A click naming no pending request answers nothing and says why.
	w := s.Watch(t.Context())
	if code, _ := slacktest.Request(t, s.Addr(), id, slackSigning, time.Now(), slacktest.BlockActions("U0777", "C0009", slackActionDeny, "ap-unknown"), true, nil); code != http.StatusOK {
		t.Fatalf("click: %d", code)
	}
	for seen := false; !seen; {
		select {
		case ev := <-w.Events():
			if ev.Kind != EventError {
				continue // the turn's reply
			}
			if msg, _ := ev.Payload["message"].(string); !strings.Contains(msg, "ap-unknown") || !strings.Contains(msg, "not pending") {
				t.Fatalf("error %v, want one naming the request", ev.Payload)
			}
			seen = true
		case <-time.After(15 * time.Second):
			t.Fatal("no gateway.event error for a click on no request")
		}
	}
	audit, err := f.st.ListAudit(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(audit); !strings.Contains(string(raw), "slack:U0777") {
		t.Fatalf("the audit log does not name the clicking user: %s", raw)
	}
}

// TestSlackSocketMode: a Socket Mode binding opens a connection with
// apps.connections.open (the app-level token), acknowledges every
// envelope, answers an events_api message once (a redelivery of the event
// is acknowledged and not answered again), and on a disconnect envelope
// opens a new connection and goes on.
func TestSlackSocketMode(t *testing.T) {
	f := newFixture(t)
	writeSecret(t, f.home, "slack", "SLACK_BOT_TOKEN="+slackBot+"\nSLACK_APP_TOKEN="+slackApp, 0o600)
	fs := slacktest.New(t, slackBot, slackApp)
	ss := &streamSessions{fakeSessions: f.ss}
	s := startSlack(t, f, ss, fs)
	id, err := s.Bind(context.Background(), BindParams{Platform: PlatformSlack, CredentialsRef: "secret:slack", Target: Target{Agent: "reviewer"}})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := slacktest.Request(t, s.Addr(), id, slackSigning, time.Now(), map[string]any{"type": "url_verification", "challenge": "c"}, false, nil); code != http.StatusNotFound {
		t.Fatalf("a socket mode binding has no request URL: %d", code)
	}
	envelope := func(envID string, attempt int, payload map[string]any) map[string]any {
		return map[string]any{"envelope_id": envID, "type": "events_api", "accepts_response_payload": false, "retry_attempt": attempt, "retry_reason": "", "payload": payload}
	}
	sock := fs.Socket(t)
	sock.Send(t, map[string]any{"type": "hello", "num_connections": 1, "connection_info": map[string]any{"app_id": "A0001"}})
	ev := slacktest.Event("Ev20", "message", "D0001", "U0001", "hi socket", "1700000002.000100", "")
	sock.Send(t, envelope("env-1", 0, ev))
	sock.WantAck(t, "env-1")
	fs.Until(t, "a post", func(c slacktest.Call) bool { return c.Body["text"] == "echo: hi socket" })
	sock.Send(t, envelope("env-2", 1, ev)) // redelivered
	sock.WantAck(t, "env-2")
	sock.Send(t, map[string]any{"type": "disconnect", "reason": "refresh_requested", "debug_info": map[string]any{"host": "fake"}})

	sock2 := fs.Socket(t)
	if sock2.Ticket != "2" {
		t.Fatalf("second connection's ticket %q, want a new apps.connections.open", sock2.Ticket)
	}
	sock2.Send(t, map[string]any{"type": "hello", "num_connections": 1})
	sock2.Send(t, envelope("env-3", 0, slacktest.Event("Ev21", "message", "D0001", "U0001", "again", "1700000002.000200", "")))
	sock2.WantAck(t, "env-3")
	fs.Until(t, "a post", func(c slacktest.Call) bool { return c.Body["text"] == "echo: again" })
	// A failed turn says so in the thread rather than nothing.
	sock2.Send(t, envelope("env-4", 0, slacktest.Event("Ev22", "message", "D0001", "U0001", "fail", "1700000002.000300", "")))
	sock2.WantAck(t, "env-4")
	failed := fs.Until(t, "a post", func(c slacktest.Call) bool { return strings.Contains(c.Body["text"].(string), "the model is down") })
	if failed.Method != "chat.postMessage" || failed.Body["thread_ts"] != "1700000002.000300" {
		t.Fatalf("failure post %+v", failed)
	}

	// A wrong app-level token: the binding is in state error, saying
	// Slack's error code and never the token.
	writeSecret(t, f.home, "wrong", "bot_token="+slackBot+"\napp_token=xapp-1-A0001-wrong-app-token", 0o600)
	bad, err := s.Bind(context.Background(), BindParams{Platform: PlatformSlack, CredentialsRef: "secret:wrong", Target: Target{Agent: "reviewer"}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		var b Binding
		for _, x := range s.List(context.Background()) {
			if x.BindingID == bad {
				b = x
			}
		}
		if b.State == StateError {
			if !strings.Contains(b.LastError, "invalid_auth") || strings.Contains(b.LastError, "wrong-app-token") {
				t.Fatalf("lastError %q", b.LastError)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("binding never in error: %+v", b)
		}
		time.Sleep(20 * time.Millisecond) // a bounded poll of observable state
	}

	s.Close()
	var all []string
	for _, p := range f.ss.allPrompts() {
		all = append(all, p...)
	}
	slices.Sort(all)
	if !slices.Equal(all, []string{"again", "fail", "hi socket"}) {
		t.Fatalf("prompts %v, want each message once", all)
	}
	if n := fs.Count("apps.connections.open"); n != 2 {
		t.Fatalf("%d apps.connections.open, want 2", n)
	}
}

// TestSlackBindValidation: a Slack credential must fit the binding's mode;
// errors name the field, never a value.
func TestSlackBindValidation(t *testing.T) {
	f := newFixture(t)
	writeSecret(t, f.home, "nosig", "bot_token="+slackBot, 0o600)
	writeSecret(t, f.home, "badbot", "bot_token=xoxp-user-token-value\nsigning_secret="+slackSigning, 0o600)
	writeSecret(t, f.home, "badapp", "bot_token="+slackBot+"\napp_token=xoxb-not-an-app-token", 0o600)
	writeSecret(t, f.home, "junk", "bot_token="+slackBot+"\npassword=hunter2-value", 0o600)
	writeSecret(t, f.home, "ok", "bot_token="+slackBot+"\nsigning_secret="+slackSigning, 0o600)
	fs := slacktest.New(t, slackBot, slackApp)
	s := startSlack(t, f, &streamSessions{fakeSessions: f.ss}, fs)
	agent := Target{Agent: "reviewer"}
	for _, tc := range []struct {
		name, ref, mode, platform, want string
	}{
		{"events without a signing secret", "secret:nosig", "", PlatformSlack, "signing secret"},
		{"socket without an app token", "secret:ok", SlackModeSocket, PlatformSlack, "app-level token"},
		{"not a bot token", "secret:badbot", "", PlatformSlack, "bot_token"},
		{"not an app token", "secret:badapp", "", PlatformSlack, "app_token"},
		{"unknown name", "secret:junk", "", PlatformSlack, `"password"`},
		{"unknown mode", "secret:ok", "rtm", PlatformSlack, `"rtm"`},
		{"mode off slack", "secret:ok", SlackModeEvents, PlatformWebhook, "only slack"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Bind(context.Background(), BindParams{Platform: tc.platform, CredentialsRef: tc.ref, Mode: tc.mode, Target: agent})
			if !errs.Is(err, errcode.InvalidParams) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want invalid_params naming %s", err, tc.want)
			}
			for _, v := range []string{slackBot, slackSigning, "hunter2", "xoxp-user", "xoxb-not"} {
				if strings.Contains(err.Error(), v) {
					t.Fatalf("the error shows a credential: %v", err)
				}
			}
		})
	}
	if s.Count() != 0 {
		t.Fatalf("%d bindings after failed binds", s.Count())
	}
}

func FuzzSlackSignature(f *testing.F) {
	f.Add([]byte(`{"type":"event_callback"}`), "1700000000", "v0=00")
	f.Add([]byte("payload=%7B%7D"), " 1700000000 ", "")
	f.Fuzz(func(t *testing.T, body []byte, ts, sig string) {
		now := time.Unix(1700000000, 0)
		err := verifySlack("secret", ts, body, sig, now)
		if err == nil && strings.TrimSpace(sig) != SlackSign("secret", strings.TrimSpace(ts), body) {
			t.Fatalf("accepted signature %q of %q", sig, ts)
		}
		good := SlackSign("secret", "1700000000", body)
		if verifySlack("secret", "1700000000", body, good, now) != nil {
			t.Fatal("rejected its own signature")
		}
		if verifySlack("secret", "1699999000", body, SlackSign("secret", "1699999000", body), now) == nil {
			t.Fatal("accepted a request 1000 s old")
		}
	})
}

func FuzzSlackEnvelope(f *testing.F) {
	f.Add([]byte(`{"envelope_id":"e1","type":"events_api","payload":{"type":"event_callback","event_id":"Ev1","event":{"type":"message","text":"hi","channel":"C1","ts":"1.2","user":"U1"}}}`))
	f.Add([]byte(`{"type":"disconnect","reason":"warning"}`))
	f.Add([]byte(`payload=%7B%22type%22%3A%22block_actions%22%2C%22actions%22%3A%5B%5D%7D`))
	f.Add([]byte(`{"type":"url_verification","challenge":"x"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if env, err := parseSlackSocketEnvelope(raw); err == nil {
			if env.Type == "" {
				t.Fatal("an envelope without a type was accepted")
			}
			if ev, err := parseSlackEnvelope(env.Payload); err == nil && ev.Type == "" {
				t.Fatal("a payload without a type was accepted")
			}
		}
		if env, err := parseSlackEnvelope(raw); err == nil && env.Type == "" {
			t.Fatal("a body without a type was accepted")
		}
		_, _ = parseSlackInteraction(raw)
		_, _ = parseSlackCredential(string(raw), func(string) string { return "" })
		_ = leadingMention.ReplaceAllString(string(raw), "")
	})
}
