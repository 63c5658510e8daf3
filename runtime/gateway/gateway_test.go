package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/gateway/telegramtest"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

const testSecret = "s3cr3t-gateway-credential-value"

// fakeSessions answers every prompt with "echo: <text>" through the real
// event log, so that the gateway follows real events.
type fakeSessions struct {
	st  store.Store
	log *eventlog.Log

	mu      sync.Mutex
	created []session.CreateParams
	prompts map[string][]string // session id → prompts
	// onPrompt, when set, runs in each Prompt before the turn starts.
	onPrompt func()
}

func (f *fakeSessions) Create(ctx context.Context, p session.CreateParams) (string, error) {
	id := ids.New("s")
	if err := f.st.CreateSession(ctx, store.Session{SessionID: id, Workdir: p.Workdir, Kind: store.KindChat, Agent: p.Agent, CreatedAt: time.Now()}); err != nil {
		return "", err
	}
	f.mu.Lock()
	f.created = append(f.created, p)
	f.mu.Unlock()
	return id, nil
}

func (f *fakeSessions) Get(ctx context.Context, id string) (session.Summary, error) {
	if _, err := f.st.GetSession(ctx, id); err != nil {
		return session.Summary{}, errs.New(errcode.NotFound, "session %s not found", id)
	}
	return session.Summary{}, nil
}

func (f *fakeSessions) Prompt(ctx context.Context, id, text string, _ []session.Attachment, origin string) (string, error) {
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
		if text == "fail" {
			_, _ = f.log.Append(bg, id, eventkind.Error, events.ErrorEvent{Code: "provider_error", Message: "the model is down"})
			_, _ = f.log.Append(bg, id, eventkind.TurnDone, events.TurnDoneEvent{TurnID: turn, Reason: events.TurnDoneReasonError})
			return
		}
		_, _ = f.log.Append(bg, id, eventkind.MessageDone, events.MessageDoneEvent{Text: "echo: " + text, Role: "assistant"})
		_, _ = f.log.Append(bg, id, eventkind.TurnDone, events.TurnDoneEvent{TurnID: turn, Reason: events.TurnDoneReasonComplete})
	}()
	return turn, nil
}

type fixture struct {
	home string
	st   store.Store
	log  *eventlog.Log
	ss   *fakeSessions
	env  map[string]string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	home := t.TempDir()
	st, err := sqlite.Open(filepath.Join(home, "trellis.db"))
	if err != nil {
		t.Fatal(err)
	}
	log := eventlog.New(st)
	t.Cleanup(func() { _ = log.Close(); _ = st.Close() })
	f := &fixture{home: home, st: st, log: log, ss: &fakeSessions{st: st, log: log}, env: map[string]string{}}
	writeSecret(t, home, "hook", testSecret, 0o600)
	return f
}

func writeSecret(t *testing.T, home, name, value string, mode os.FileMode) {
	t.Helper()
	dir := SecretsDir(home)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(value+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) start(t *testing.T, opts Options) *Service {
	t.Helper()
	opts.Home, opts.Workdir = f.home, f.home
	opts.Getenv = func(k string) string { return f.env[k] }
	if opts.PollTimeout == 0 {
		opts.PollTimeout = time.Second
	}
	s, err := New(context.Background(), Deps{Settings: f.st, Sessions: f.ss, Events: f.log,
		AgentExists: func(name string) error {
			if name != "reviewer" {
				return errs.Wrap(errcode.NotFound, errors.New("no such agent"), "no agent named %s", name)
			}
			return nil
		}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestBindValidation(t *testing.T) {
	f := newFixture(t)
	writeSecret(t, f.home, "loose", "x", 0o644)
	f.env["TOKEN"] = "tok"
	s := f.start(t, Options{})
	agentT := Target{Agent: "reviewer"}
	for _, tc := range []struct {
		name    string
		p       BindParams
		wantMsg string
		code    string // invalid_params when empty
	}{
		{"unknown platform", BindParams{Platform: "irc", CredentialsRef: "env:TOKEN", Target: agentT}, "not one of", ""},
		{"bad ref", BindParams{Platform: "webhook", CredentialsRef: "to ken", Target: agentT}, "env:NAME, secret:NAME or NAME", ""},
		{"missing name", BindParams{Platform: "webhook", CredentialsRef: "nope", Target: agentT}, "TRELLIS_NOPE_TOKEN or NOPE_BOT_TOKEN", ""},
		{"path in ref", BindParams{Platform: "webhook", CredentialsRef: "secret:../x", Target: agentT}, "env:NAME, secret:NAME or NAME", ""},
		{"missing env", BindParams{Platform: "webhook", CredentialsRef: "env:NOPE", Target: agentT}, `"env:NOPE"`, ""},
		{"missing secret", BindParams{Platform: "webhook", CredentialsRef: "secret:nope", Target: agentT}, `"secret:nope"`, ""},
		{"loose secret", BindParams{Platform: "webhook", CredentialsRef: "secret:loose", Target: agentT}, "must be 0600", ""},
		{"no target", BindParams{Platform: "webhook", CredentialsRef: "env:TOKEN"}, "exactly one", ""},
		{"two targets", BindParams{Platform: "webhook", CredentialsRef: "env:TOKEN", Target: Target{Agent: "reviewer", Session: "s-1"}}, "exactly one", ""},
		{"unknown agent", BindParams{Platform: "webhook", CredentialsRef: "env:TOKEN", Target: Target{Agent: "ghost"}}, "ghost", errcode.NotFound},
		{"unknown session", BindParams{Platform: "webhook", CredentialsRef: "env:TOKEN", Target: Target{Session: "s-none"}}, "s-none", errcode.NotFound},
		{"bad workdir", BindParams{Platform: "webhook", CredentialsRef: "env:TOKEN", Target: Target{NewSession: &NewSessionTarget{Workdir: "/does/not/exist"}}}, "not an existing directory", ""},
		{"bad mode", BindParams{Platform: "webhook", CredentialsRef: "env:TOKEN", Target: Target{NewSession: &NewSessionTarget{Workdir: f.home, Mode: "yolo"}}}, "yolo", ""},
		// Without a managed workdirs' root, a newSession target must name
		// its workdir.
		{"no workdir", BindParams{Platform: "webhook", CredentialsRef: "env:TOKEN", Target: Target{NewSession: &NewSessionTarget{}}}, "workdir is required", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Bind(context.Background(), tc.p)
			code := tc.code
			if code == "" {
				code = errcode.InvalidParams
			}
			if !errs.Is(err, code) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("err = %v, want %s containing %q", err, code, tc.wantMsg)
			}
			if strings.Contains(err.Error(), "tok") && tc.name != "bad ref" {
				t.Fatalf("error shows a credential: %v", err)
			}
		})
	}
	if n := s.Count(); n != 0 {
		t.Fatalf("Count = %d after failed binds", n)
	}
}

func TestBindListUnbindPersist(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	s := f.start(t, Options{})
	id, err := s.Bind(ctx, BindParams{Platform: PlatformWebhook, CredentialsRef: "secret:hook", Target: Target{Agent: "reviewer"}, ChannelID: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(id, "b-") {
		t.Fatalf("id %q", id)
	}
	if err := s.BindAgentChannel(ctx, "reviewer", "webhook:ops", "secret:hook"); err != nil {
		t.Fatal(err)
	}
	if err := s.BindAgentChannel(ctx, "reviewer", "webhook", ""); !errs.Is(err, errcode.InvalidParams) {
		t.Fatalf("bad channel: %v", err)
	}
	if got := s.AgentChannels("reviewer"); len(got) != 2 {
		t.Fatalf("AgentChannels = %v", got)
	}
	list := s.List(ctx)
	raw, _ := json.Marshal(list)
	if bytes.Contains(raw, []byte(testSecret)) {
		t.Fatal("List shows the credential")
	}
	stored, _ := f.st.ListSettings(ctx, Namespace)
	for _, st := range stored {
		if bytes.Contains(st.Value, []byte(testSecret)) {
			t.Fatal("the store holds the credential")
		}
	}
	if len(list) != 2 || list[0].State != StateActive {
		t.Fatalf("List = %+v", list)
	}
	s.Close()

	// A restarted service restores both; a credential gone since is an error state.
	if err := os.Remove(filepath.Join(SecretsDir(f.home), "hook")); err != nil {
		t.Fatal(err)
	}
	s2 := f.start(t, Options{})
	list = s2.List(ctx)
	if len(list) != 2 || list[0].State != StateError || !strings.Contains(list[0].LastError, "secret:hook") {
		t.Fatalf("restored = %+v", list)
	}
	if err := s2.Unbind(ctx, id); err != nil {
		t.Fatal(err)
	}
	err = s2.Unbind(ctx, id)
	if !errs.Is(err, errcode.NotFound) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("second unbind: %v", err)
	}
	if s2.Count() != 1 {
		t.Fatalf("Count = %d", s2.Count())
	}
}

// post sends a signed webhook message and returns the response.
func post(t *testing.T, s *Service, id, key string, body any) (*http.Response, []byte) {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.Addr()+"/v1/gateway/webhook/"+id, bytes.NewReader(raw))
	req.Header.Set(SignatureHeader, Sign(key, raw))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

func TestWebhookRoundTrip(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	s := f.start(t, Options{})
	w := s.Watch(t.Context())
	id, err := s.Bind(ctx, BindParams{Platform: PlatformWebhook, CredentialsRef: "secret:hook", Target: Target{NewSession: &NewSessionTarget{Workdir: f.home, Mode: "plan"}}})
	if err != nil {
		t.Fatal(err)
	}
	// wait: true answers in the response; the same conversation reuses its session.
	for i, text := range []string{"hello", "again"} {
		resp, body := post(t, s, id, testSecret, WebhookMessage{Text: text, ChannelID: "c1", UserID: "u1", Wait: true, MessageID: fmt.Sprint("m", i)})
		var r WebhookReply
		if resp.StatusCode != 200 || json.Unmarshal(body, &r) != nil || r.Text != "echo: "+text || r.InReplyTo != fmt.Sprint("m", i) || r.BindingID != id {
			t.Fatalf("reply %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if len(f.ss.created) != 1 || f.ss.created[0].Mode != "plan" {
		t.Fatalf("created = %+v", f.ss.created)
	}
	// replyUrl: the answer is posted there.
	got := make(chan WebhookReply, 1)
	replies := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rep WebhookReply
		_ = json.NewDecoder(r.Body).Decode(&rep)
		got <- rep
	}))
	defer replies.Close()
	resp, body := post(t, s, id, testSecret, WebhookMessage{Text: "later", ChannelID: "c2", ReplyURL: replies.URL})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("async: %d %s", resp.StatusCode, body)
	}
	select {
	case rep := <-got:
		if rep.Text != "echo: later" {
			t.Fatalf("posted reply %+v", rep)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reply posted")
	}
	// Bad signature, unknown binding, empty text.
	if resp, _ := post(t, s, id, "wrong", WebhookMessage{Text: "x", Wait: true}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bad signature: %d", resp.StatusCode)
	}
	if resp, _ := post(t, s, "b-nope", testSecret, WebhookMessage{Text: "x", Wait: true}); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown binding: %d", resp.StatusCode)
	}
	if resp, _ := post(t, s, id, testSecret, WebhookMessage{Wait: true}); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("empty text: %d", resp.StatusCode)
	}
	// A failing turn is a 502 and an error event; the binding shows it.
	if resp, body := post(t, s, id, testSecret, WebhookMessage{Text: "fail", Wait: true}); resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "the model is down") {
		t.Fatalf("failing turn: %d %s", resp.StatusCode, body)
	}
	if b := s.List(ctx)[0]; b.State != StateError || !strings.Contains(b.LastError, "the model is down") {
		t.Fatalf("after failure: %+v", b)
	}
	kinds := map[string]int{}
	deadline := time.After(5 * time.Second)
	for kinds[EventError] == 0 {
		select {
		case ev := <-w.Events():
			if ev.BindingID != id {
				t.Fatalf("event of %s", ev.BindingID)
			}
			raw, _ := json.Marshal(ev.Payload)
			if bytes.Contains(raw, []byte(testSecret)) {
				t.Fatal("an event shows the credential")
			}
			kinds[ev.Kind]++
		case <-deadline:
			t.Fatalf("events so far %v", kinds)
		}
	}
	if kinds[EventMessage] != 4 || kinds[EventReply] != 3 {
		t.Fatalf("events %v", kinds)
	}
}

// TestConversationOfADeletedSession: a conversation whose session was
// deleted (session.deleteSaved, a retention sweep) goes on in a new
// session, which the binding then remembers.
func TestConversationOfADeletedSession(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	s := f.start(t, Options{})
	id, err := s.Bind(ctx, BindParams{Platform: PlatformWebhook, CredentialsRef: "secret:hook", Target: Target{NewSession: &NewSessionTarget{Workdir: f.home, Mode: "plan"}}})
	if err != nil {
		t.Fatal(err)
	}
	say := func(text string) {
		t.Helper()
		resp, body := post(t, s, id, testSecret, WebhookMessage{Text: text, ChannelID: "c1", UserID: "u1", Wait: true})
		var r WebhookReply
		if resp.StatusCode != 200 || json.Unmarshal(body, &r) != nil || r.Text != "echo: "+text {
			t.Fatalf("reply to %q: %d %s", text, resp.StatusCode, body)
		}
	}
	sessionOf := func(text string) string {
		t.Helper()
		f.ss.mu.Lock()
		defer f.ss.mu.Unlock()
		for sid, texts := range f.ss.prompts {
			if slices.Contains(texts, text) {
				return sid
			}
		}
		t.Fatalf("no session was prompted with %q: %v", text, f.ss.prompts)
		return ""
	}
	say("hello")
	first := sessionOf("hello")
	if _, err := f.st.DeleteSessions(ctx, store.Unfenced(), []string{first}); err != nil {
		t.Fatal(err)
	}
	say("again")
	second := sessionOf("again")
	if second == first || len(f.ss.created) != 2 {
		t.Fatalf("after the session's deletion: conversation in %s (was %s), %d sessions created", second, first, len(f.ss.created))
	}
	say("and again")
	if third := sessionOf("and again"); third != second || len(f.ss.created) != 2 {
		t.Fatalf("the next message went to %s, want %s (%d sessions created)", third, second, len(f.ss.created))
	}
}

func TestTelegramRoundTrip(t *testing.T) {
	f := newFixture(t)
	f.env["TG"] = "123:tg-token"
	ft := telegramtest.New(t, "123:tg-token")
	s := f.start(t, Options{TelegramAPI: ft.URL()})
	id, err := s.Bind(context.Background(), BindParams{Platform: PlatformTelegram, CredentialsRef: "env:TG", Target: Target{Agent: "reviewer"}, ChannelID: "42"})
	if err != nil {
		t.Fatal(err)
	}
	ft.Message(7, 1, "not for us") // another chat: ignored
	mid := ft.Message(42, 1, "hi bot")
	if m := ft.Next(t); m.Method != "sendMessage" || m.Text() != "echo: hi bot" || m.Body["chat_id"] != float64(42) || m.Body["reply_to_message_id"] != float64(mid) {
		t.Fatalf("sent %+v", m)
	}
	if len(f.ss.created) != 1 || f.ss.created[0].Agent != "reviewer" {
		t.Fatalf("created %+v", f.ss.created)
	}
	// A wrong token puts the binding in state error without showing it.
	f.env["BAD"] = "999:bad-token"
	bad, err := s.Bind(context.Background(), BindParams{Platform: PlatformTelegram, CredentialsRef: "env:BAD", Target: Target{Agent: "reviewer"}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var b Binding
		for _, x := range s.List(context.Background()) {
			if x.BindingID == bad {
				b = x
			}
		}
		if b.State == StateError {
			if strings.Contains(b.LastError, "bad-token") || !strings.Contains(b.LastError, "Unauthorized") {
				t.Fatalf("lastError %q", b.LastError)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("binding %s never in error: %+v", id, b)
		}
		time.Sleep(20 * time.Millisecond) // a bounded poll of observable state
	}
}

func FuzzVerify(f *testing.F) {
	f.Add([]byte(`{"text":"hi"}`), "sha256=00")
	f.Fuzz(func(t *testing.T, body []byte, header string) {
		if verify("k", body, header) && header != Sign("k", body) {
			t.Fatalf("accepted %q", header)
		}
		if !verify("k", body, Sign("k", body)) {
			t.Fatal("rejected its own signature")
		}
	})
}

func TestTelegramOffsetSurvivesRestart(t *testing.T) {
	f := newFixture(t)
	f.env["TG"] = "123:tg-token"
	ft := telegramtest.New(t, "123:tg-token")
	s := f.start(t, Options{TelegramAPI: ft.URL()})
	if _, err := s.Bind(context.Background(), BindParams{Platform: PlatformTelegram, CredentialsRef: "env:TG", Target: Target{Agent: "reviewer"}, ChannelID: "42"}); err != nil {
		t.Fatal(err)
	}
	want := func(text string) {
		t.Helper()
		if m := ft.Next(t); m.Method != "sendMessage" || m.Text() != text {
			t.Fatalf("sent %+v, want %q", m, text)
		}
	}
	ft.Message(42, 1, "first")
	want("echo: first")
	s.Close()
	// The restarted service restores the binding; the fake still offers
	// update 1 to a poll without an offset, which must not be answered again.
	s2 := f.start(t, Options{TelegramAPI: ft.URL()})
	_ = s2
	ft.Message(42, 1, "second")
	want("echo: second")
	select {
	case m := <-ft.Calls():
		t.Fatalf("answered again after a restart: %v", m)
	case <-time.After(300 * time.Millisecond): // nothing more may arrive; a bounded check
	}
}

// TestBareCredentialName: snowpea's credentialsRef form, a bare NAME, is
// the secret file NAME, else TRELLIS_<NAME>_TOKEN, else <NAME>_BOT_TOKEN;
// agent.bindChannel's default reference is the platform's name.
func TestBareCredentialName(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	s := f.start(t, Options{})
	if _, err := s.Bind(ctx, BindParams{Platform: PlatformWebhook, CredentialsRef: "hook", Target: Target{Agent: "reviewer"}}); err != nil {
		t.Fatalf("bare name of a secret file: %v", err)
	}
	err := s.BindAgentChannel(ctx, "reviewer", "webhook:a", "")
	if !errs.Is(err, errcode.InvalidParams) || !strings.Contains(err.Error(), "TRELLIS_WEBHOOK_TOKEN or WEBHOOK_BOT_TOKEN") {
		t.Fatalf("default reference with no credential: %v", err)
	}
	for i, env := range []string{"WEBHOOK_BOT_TOKEN", "TRELLIS_WEBHOOK_TOKEN"} {
		f.env[env] = "tok-" + env
		if err := s.BindAgentChannel(ctx, "reviewer", fmt.Sprintf("webhook:e%d", i), ""); err != nil {
			t.Fatalf("default reference with %s: %v", env, err)
		}
	}
	if got, err := s.resolveCredential("webhook"); err != nil || got != "tok-TRELLIS_WEBHOOK_TOKEN" {
		t.Fatalf("TRELLIS_WEBHOOK_TOKEN comes before WEBHOOK_BOT_TOKEN: %q %v", got, err)
	}
}
