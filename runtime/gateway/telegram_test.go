package gateway

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/gateway/telegramtest"
	"github.com/trellis-run/trellis/runtime/store"
)

const tgToken = "123:tg-token"

// startTelegram starts a service on f's store with the streaming sessions
// and their broker (nil: none) against the fake Bot API.
func startTelegram(t *testing.T, f *fixture, ss *streamSessions, ft *telegramtest.Fake) *Service {
	t.Helper()
	deps := Deps{Settings: f.st, Sessions: ss, Events: f.log}
	if ss.broker != nil {
		deps.Approvals = ss.broker
	}
	f.env["TG"] = tgToken
	s, err := New(context.Background(), deps, Options{
		Home: f.home, Workdir: f.home, Getenv: func(k string) string { return f.env[k] },
		TelegramAPI: ft.URL(), PollTimeout: time.Second,
		TelegramEditInterval: time.Hour, // one edit: the last
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestTelegramStreamedAnswer: the answer is sent as a reply to the
// message at its first chunk and edited to the whole answer; an answer
// longer than a message holds fills the streamed message and goes on in a
// further one, nothing lost; a failed turn says why. The poller asks for messages and callback
// queries.
func TestTelegramStreamedAnswer(t *testing.T) {
	f := newFixture(t)
	ft := telegramtest.New(t, tgToken)
	release := make(chan struct{}, 2)
	ss := &streamSessions{fakeSessions: f.ss, gate: func(string) { <-release }}
	s := startTelegram(t, f, ss, ft)
	if _, err := s.Bind(context.Background(), BindParams{Platform: PlatformTelegram, CredentialsRef: "env:TG", Target: Target{Agent: "reviewer"}, ChannelID: "42"}); err != nil {
		t.Fatal(err)
	}
	mid := ft.Message(42, 1, "hello there")
	first := ft.Next(t)
	if first.Method != "sendMessage" || first.Text() != "echo: " || first.Body["chat_id"] != float64(42) || first.Body["reply_to_message_id"] != float64(mid) {
		t.Fatalf("first call %+v, want the first chunk sent as a reply", first)
	}
	release <- struct{}{}
	edit := ft.Next(t)
	if edit.Method != "editMessageText" || edit.MessageID != first.MessageID || edit.Text() != "echo: hello there" {
		t.Fatalf("edit %+v, want the message edited to the whole answer", edit)
	}
	if got := ft.AllowedUpdates(); !strings.Contains(got, `"callback_query"`) || !strings.Contains(got, `"message"`) {
		t.Fatalf("allowed_updates %s", got)
	}

	// 5000 characters, some of them two UTF-16 code units each.
	long := strings.Repeat("word 😀 ", 100) + strings.Repeat("x", 4200)
	ft.Message(42, 1, long)
	head := ft.Next(t)
	if head.Method != "sendMessage" || head.Text() != "echo: " {
		t.Fatalf("first call %+v", head)
	}
	release <- struct{}{}
	full := ft.Until(t, "the streamed message's last edit", func(c telegramtest.Call) bool { return c.Method == "editMessageText" && c.MessageID == head.MessageID })
	rest := ft.Until(t, "the answer's second message", func(c telegramtest.Call) bool { return c.Method == "sendMessage" })
	if n := len(utf16.Encode([]rune(full.Text()))); n > telegramtest.MaxText || n < telegramtest.MaxText-400 {
		t.Fatalf("the first message holds %d code units, want it filled up to %d", n, telegramtest.MaxText)
	}
	if full.Text()+rest.Text() != "echo: "+long {
		t.Fatalf("the two messages do not make the answer: %d + %d bytes of %d", len(full.Text()), len(rest.Text()), len("echo: "+long))
	}

	// A failed turn says why in the chat rather than nothing.
	mid = ft.Message(42, 1, "fail")
	failed := ft.Next(t)
	if failed.Method != "sendMessage" || !strings.Contains(failed.Text(), "the model is down") || failed.Body["reply_to_message_id"] != float64(mid) {
		t.Fatalf("failure %+v, want a reply saying why", failed)
	}
}

// TestTelegramApprovalButtons: an approval request of the turn is sent
// with an inline keyboard (Allow, Deny). A click by another user is
// refused with an alert and answers nothing; the bound user's Allow
// answers it as telegram:<user id>, scope once, the message is edited to
// the outcome without its buttons and the turn goes on to its answer. A
// Deny ends the next request the other way.
func TestTelegramApprovalButtons(t *testing.T) {
	f := newFixture(t)
	ft := telegramtest.New(t, tgToken)
	broker := approval.NewBroker(f.st, nil, nil, approval.BrokerOptions{})
	t.Cleanup(broker.Close)
	ss := &streamSessions{fakeSessions: f.ss, broker: broker}
	s := startTelegram(t, f, ss, ft)
	if _, err := s.Bind(context.Background(), BindParams{Platform: PlatformTelegram, CredentialsRef: "env:TG", Target: Target{NewSession: &NewSessionTarget{Workdir: f.home}}, ChannelID: "42", UserID: "1"}); err != nil {
		t.Fatal(err)
	}
	resolved := broker.Watch(t.Context())
	// ask returns the approval message of the request a prompt makes and
	// its buttons' callback_data.
	ask := func(text string) (telegramtest.Call, string, string) {
		t.Helper()
		ft.Message(42, 1, text)
		c := ft.Next(t)
		kb, _ := c.Body["reply_markup"].(map[string]any)["inline_keyboard"].([]any)
		if c.Method != "sendMessage" || len(kb) != 1 || !strings.Contains(c.Text(), "Approval needed") {
			t.Fatalf("approval message %+v, want one with an inline keyboard", c)
		}
		row := kb[0].([]any)
		allow, deny := row[0].(map[string]any), row[1].(map[string]any)
		a, d := allow["callback_data"].(string), deny["callback_data"].(string)
		if allow["text"] != "Allow" || deny["text"] != "Deny" || !strings.HasPrefix(a, "ap:ap-") || !strings.HasSuffix(a, ":allow") || len(d) > 64 {
			t.Fatalf("buttons %v", row)
		}
		return c, a, d
	}
	waitResolved := func(decision string) {
		t.Helper()
		for {
			select {
			case ev := <-resolved:
				if r := ev.Resolved; r != nil {
					if r.Decision != decision || r.By != "telegram:1" || r.Scope != approval.ScopeOnce {
						t.Fatalf("resolution %+v, want %s by telegram:1, scope once", r, decision)
					}
					return
				}
			case <-time.After(telegramtest.Timeout):
				t.Fatal("the click answered nothing")
			}
		}
	}

	msg, allow, _ := ask("run ls -la")
	if !strings.Contains(msg.Text(), "ls -la") {
		t.Fatalf("the request's text does not show the command: %q", msg.Text())
	}
	// Another user in the chat: refused with an alert, nothing answered.
	q := ft.Click(42, 2, msg.MessageID, allow)
	refused := ft.Next(t)
	if refused.Method != "answerCallbackQuery" || refused.Body["callback_query_id"] != q || refused.Body["show_alert"] != true || !strings.Contains(refused.Text(), "Only the bound user") {
		t.Fatalf("answer to another user's click %+v, want an alert saying why", refused)
	}
	if n := len(broker.List("", "")); n != 1 {
		t.Fatalf("%d pending after another user's click, want 1", n)
	}
	// The bound user allows it.
	q = ft.Click(42, 1, msg.MessageID, allow)
	waitResolved(approval.DecisionAllow)
	var acked, shown, answered bool
	for !acked || !shown || !answered {
		c := ft.Next(t)
		switch {
		case c.Method == "answerCallbackQuery":
			if c.Body["callback_query_id"] != q || c.Body["show_alert"] == true {
				t.Fatalf("answer to the bound user's click %+v", c)
			}
			acked = true
		case c.Method == "editMessageText" && c.MessageID == msg.MessageID:
			if !strings.Contains(c.Text(), "Allowed by telegram:1") || c.Body["reply_markup"] != nil {
				t.Fatalf("outcome %+v, want the outcome and no buttons", c.Body)
			}
			shown = true
		case strings.Contains(c.Text(), "ran: ls -la"):
			answered = true
		}
	}

	msg, _, deny := ask("run rm -rf /")
	ft.Click(42, 1, msg.MessageID, deny)
	waitResolved(approval.DecisionDeny)
	ft.Until(t, "the outcome", func(c telegramtest.Call) bool {
		return c.Method == "editMessageText" && c.MessageID == msg.MessageID && strings.Contains(c.Text(), "Denied by telegram:1")
	})
	ft.Until(t, "the answer", func(c telegramtest.Call) bool { return strings.HasPrefix(c.Text(), "denied: ") })

	// A click on a request no longer pending says so.
	ft.Click(42, 1, msg.MessageID, deny)
	stale := ft.Until(t, "the answer to a stale click", func(c telegramtest.Call) bool { return c.Method == "answerCallbackQuery" })
	if stale.Body["show_alert"] != true || !strings.Contains(stale.Text(), "no longer pending") {
		t.Fatalf("answer to a stale click %+v", stale)
	}
	audit, err := f.st.ListAudit(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range audit {
		if e.By == "telegram:1" && e.Scope == approval.ScopeOnce {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d audit entries by telegram:1 with scope once, want 2: %+v", n, audit)
	}

	// A paused turn's budget request in the queue is not posted (raising a
	// budget needs the caller's role), and a click naming it is refused.
	var sid string
	ss.mu.Lock()
	for id := range ss.prompts {
		sid = id
	}
	ss.mu.Unlock()
	bctx, stop := context.WithCancel(context.Background())
	defer stop()
	tokens := int64(10)
	go broker.AskBudget(bctx, approval.Question{SessionID: sid, Kind: store.KindChat, TurnID: "t-paused"},
		approval.BudgetArgs{Reason: "budget_reached", RaiseTo: approval.BudgetLimits{MaxTokens: &tokens}})
	var budgetID string
	for budgetID == "" {
		select {
		case ev := <-resolved:
			if ev.Pending != nil && ev.Pending.Tool == approval.BudgetTool {
				budgetID = ev.Pending.RequestID
			}
		case <-time.After(telegramtest.Timeout):
			t.Fatal("the budget request never reached the queue")
		}
	}
	ft.Message(42, 1, "run echo hi")
	msg = ft.Until(t, "the turn's first approval message", func(c telegramtest.Call) bool {
		return c.Method == "sendMessage" && strings.Contains(c.Text(), "Approval needed")
	})
	kb, _ := msg.Body["reply_markup"].(map[string]any)["inline_keyboard"].([]any)
	allow = kb[0].([]any)[0].(map[string]any)["callback_data"].(string)
	if !strings.Contains(msg.Text(), "echo hi") {
		t.Fatalf("the first approval message of the turn is %q, want the shell call's (the budget request must not be posted)", msg.Text())
	}
	ft.Click(42, 1, msg.MessageID, tgCallbackPrefix+budgetID+":allow")
	refusedBudget := ft.Until(t, "the answer to a click naming the budget request", func(c telegramtest.Call) bool { return c.Method == "answerCallbackQuery" })
	if refusedBudget.Body["show_alert"] != true || !strings.Contains(refusedBudget.Text(), "no longer pending") {
		t.Fatalf("answer to a click naming the budget request %+v", refusedBudget)
	}
	if reqs := broker.List("", sid); len(reqs) != 2 {
		t.Fatalf("%d requests pending after the refused click, want the budget request and the shell call's", len(reqs))
	}
	ft.Click(42, 1, msg.MessageID, allow)
	ft.Until(t, "the answer", func(c telegramtest.Call) bool { return strings.Contains(c.Text(), "ran: echo hi") })
}

func FuzzTelegramCallback(f *testing.F) {
	f.Add("ap:ap-0123456789abcdef:allow")
	f.Add("ap::deny")
	f.Add("ap:a:b:deny")
	f.Fuzz(func(t *testing.T, data string) {
		id, decision, ok := parseTelegramCallback(data)
		if !ok {
			return
		}
		if id == "" || (decision != approval.DecisionAllow && decision != approval.DecisionDeny) || tgCallbackPrefix+id+":"+decision != data {
			t.Fatalf("%q read as %q %q", data, id, decision)
		}
	})
}

func FuzzSplitTelegram(f *testing.F) {
	f.Add(strings.Repeat("a\n", 3000))
	f.Add(strings.Repeat("😀", 3000))
	f.Fuzz(func(t *testing.T, text string) {
		parts := splitTelegram(text)
		if strings.Join(parts, "") != text {
			t.Fatal("the parts do not make the text")
		}
		for i, p := range parts {
			if len(utf16.Encode([]rune(p))) > tgMaxText || (p == "" && len(parts) > 1) {
				t.Fatalf("part %d of %d: %d bytes", i, len(parts), len(p))
			}
		}
	})
}
