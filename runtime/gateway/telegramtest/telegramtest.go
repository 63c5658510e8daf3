// Package telegramtest is a local Telegram Bot API for tests: the methods
// the gateway calls (getUpdates with offset and a bounded long poll,
// sendMessage, editMessageText, answerCallbackQuery) with the Bot API's
// shapes: /bot<token>/<method>, {ok, result} or {ok: false, error_code,
// description} answers, the 4096-character limit of a message's text
// (counted in UTF-16 code units, as Telegram does) and "message is not
// modified" for an edit that changes nothing. Tests push messages and
// button clicks (callback queries) as updates and read the calls made.
package telegramtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"
)

// Timeout is how long the waits of a Fake (Next, Until) wait before they
// fail the test.
const Timeout = 20 * time.Second

// MaxText is the longest text a message may hold, in UTF-16 code units.
const MaxText = 4096

// Fake is a local Bot API server accepting one bot token.
type Fake struct {
	Token string
	srv   *httptest.Server

	mu       sync.Mutex
	updates  []map[string]any
	changed  chan struct{} // closed and replaced when an update is pushed
	nextUp   int64
	nextMsg  int64
	nextCB   int
	texts    map[int64]string // message id → its text as it shows now
	markups  map[int64]string // message id → its reply_markup ("" none)
	calls    []Call
	allowed  string // the last getUpdates' allowed_updates
	callsOut chan Call
}

// Call is one call of a method that changes the chat.
type Call struct {
	Method string
	Body   map[string]any
	// MessageID is the message sent or edited (sendMessage,
	// editMessageText).
	MessageID int64
}

// Text is the call's text ("" when it has none).
func (c Call) Text() string { s, _ := c.Body["text"].(string); return s }

// New starts a fake that accepts token; it stops with the test.
func New(t testing.TB, token string) *Fake {
	t.Helper()
	f := &Fake{Token: token, changed: make(chan struct{}), nextMsg: 100, texts: map[int64]string{}, markups: map[int64]string{}, callsOut: make(chan Call, 256)}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the Bot API base URL (the gateway's TelegramAPI option).
func (f *Fake) URL() string { return f.srv.URL }

func (f *Fake) push(u map[string]any) {
	f.nextUp++
	u["update_id"] = f.nextUp
	f.updates = append(f.updates, u)
	close(f.changed)
	f.changed = make(chan struct{})
}

// Message pushes a text message from user in chat and returns its
// message_id.
func (f *Fake) Message(chat, user int64, text string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextMsg++
	f.push(map[string]any{"message": map[string]any{
		"message_id": f.nextMsg, "date": time.Now().Unix(), "text": text,
		"chat": map[string]any{"id": chat, "type": "private"},
		"from": map[string]any{"id": user, "is_bot": false, "first_name": "Ann", "username": "ann" + strconv.FormatInt(user, 10)},
	}})
	return f.nextMsg
}

// Click pushes a callback query: user clicked the button with data on
// the message messageID of chat (its text as it shows now). It returns the
// query's id.
func (f *Fake) Click(chat, user, messageID int64, data string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextCB++
	id := fmt.Sprintf("cb-%d", f.nextCB)
	f.push(map[string]any{"callback_query": map[string]any{
		"id": id, "chat_instance": "ci-1", "data": data,
		"from": map[string]any{"id": user, "is_bot": false, "first_name": "Ann", "username": "ann" + strconv.FormatInt(user, 10)},
		"message": map[string]any{
			"message_id": messageID, "date": time.Now().Unix(), "text": f.texts[messageID],
			"chat": map[string]any{"id": chat, "type": "private"},
		},
	}})
	return id
}

// AllowedUpdates is the allowed_updates of the last getUpdates.
func (f *Fake) AllowedUpdates() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.allowed
}

// Methods lists the calls that change the chat so far, by method.
func (f *Fake) Methods() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		out = append(out, c.Method)
	}
	return out
}

// Calls delivers each sendMessage, editMessageText and answerCallbackQuery
// as it is served.
func (f *Fake) Calls() <-chan Call { return f.callsOut }

// Next returns the next call that changes the chat.
func (f *Fake) Next(t testing.TB) Call {
	t.Helper()
	select {
	case c := <-f.callsOut:
		return c
	case <-time.After(Timeout):
		t.Fatalf("no Bot API call within %v; calls %v", Timeout, f.Methods())
	}
	return Call{}
}

// Until returns the next call keep accepts, skipping the others; what
// names it in the failure.
func (f *Fake) Until(t testing.TB, what string, keep func(Call) bool) Call {
	t.Helper()
	deadline := time.After(Timeout)
	var seen []string
	for {
		select {
		case c := <-f.callsOut:
			if keep(c) {
				return c
			}
			seen = append(seen, fmt.Sprintf("%s %d %.60q", c.Method, c.MessageID, c.Text()))
		case <-deadline:
			t.Fatalf("no %s within %v; skipped %q", what, Timeout, seen)
		}
	}
}

func answer(w http.ResponseWriter, status int, v map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, desc string) {
	answer(w, status, map[string]any{"ok": false, "error_code": status, "description": desc})
}

func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	method, ok := strings.CutPrefix(r.URL.Path, "/bot"+f.Token+"/")
	if !ok {
		fail(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	if method == "getUpdates" {
		f.getUpdates(w, r)
		return
	}
	body := map[string]any{}
	raw, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") || json.Unmarshal(raw, &body) != nil {
		fail(w, http.StatusBadRequest, "Bad Request: want a JSON body")
		return
	}
	call := Call{Method: method, Body: body}
	var result any = true
	f.mu.Lock()
	switch method {
	case "sendMessage", "editMessageText":
		text, _ := body["text"].(string)
		if body["chat_id"] == nil {
			f.mu.Unlock()
			fail(w, http.StatusBadRequest, "Bad Request: chat_id is empty")
			return
		}
		if strings.TrimSpace(text) == "" {
			f.mu.Unlock()
			fail(w, http.StatusBadRequest, "Bad Request: message text is empty")
			return
		}
		if len(utf16.Encode([]rune(text))) > MaxText {
			f.mu.Unlock()
			fail(w, http.StatusBadRequest, "Bad Request: message is too long")
			return
		}
		if method == "sendMessage" {
			f.nextMsg++
			call.MessageID = f.nextMsg
		} else {
			id, _ := body["message_id"].(float64)
			call.MessageID = int64(id)
			old, ok := f.texts[call.MessageID]
			if !ok {
				f.mu.Unlock()
				fail(w, http.StatusBadRequest, "Bad Request: message to edit not found")
				return
			}
			if old == text && f.markups[call.MessageID] == markup(body) {
				f.mu.Unlock()
				fail(w, http.StatusBadRequest, "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message")
				return
			}
		}
		f.texts[call.MessageID] = text
		f.markups[call.MessageID] = markup(body)
		result = map[string]any{"message_id": call.MessageID, "date": time.Now().Unix(), "text": text, "chat": map[string]any{"id": body["chat_id"], "type": "private"}}
	case "answerCallbackQuery":
		if id, _ := body["callback_query_id"].(string); id == "" {
			f.mu.Unlock()
			fail(w, http.StatusBadRequest, "Bad Request: query is too old and response timeout expired or query ID is invalid")
			return
		}
	default:
		f.mu.Unlock()
		fail(w, http.StatusNotFound, "Not Found")
		return
	}
	f.calls = append(f.calls, call)
	f.mu.Unlock()
	f.callsOut <- call
	answer(w, http.StatusOK, map[string]any{"ok": true, "result": result})
}

// markup is a call's reply_markup as JSON ("" when it has none: an edit
// without one removes the inline keyboard).
func markup(body map[string]any) string {
	if body["reply_markup"] == nil {
		return ""
	}
	raw, _ := json.Marshal(body["reply_markup"])
	return string(raw)
}

// getUpdates answers the updates from offset on, waiting for one (at most
// half a second, so that tests stay quick) when there is none. Updates
// before the offset are kept: a poller must skip them itself.
func (f *Fake) getUpdates(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, _ := strconv.ParseInt(q.Get("offset"), 10, 64)
	deadline := time.NewTimer(500 * time.Millisecond)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		f.allowed = q.Get("allowed_updates")
		out := []map[string]any{}
		for _, u := range f.updates {
			if u["update_id"].(int64) >= offset {
				out = append(out, u)
			}
		}
		changed := f.changed
		f.mu.Unlock()
		if len(out) > 0 {
			answer(w, http.StatusOK, map[string]any{"ok": true, "result": out})
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			answer(w, http.StatusOK, map[string]any{"ok": true, "result": out})
			return
		case <-r.Context().Done():
			return
		}
	}
}
