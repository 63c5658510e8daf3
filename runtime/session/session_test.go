package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/llm/fake"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/toolbox"
)

var script = `{"steps":[
 {"match":"hello","text":"Hi there, nice to meet you."},
 {"match":"slow","text":"` + strings.Repeat("word ", 600) + `","delaySec":60},
 {"match":"list","text":"Listing.","tool_calls":[{"name":"list_dir","arguments":{"path":"."}}]},
 {"after_tool":"list_dir","text":"Done listing."},
 {"match":"summarise","text":"A short summary."},
 {"default":true,"text":"default answer"}
],"repeat":true}`

type providers struct{ p llm.Provider }

func (p providers) Open(string) (llm.Provider, error) { return p.p, nil }
func (p providers) Default() string                   { return "fake" }

type harness struct {
	st   store.Store
	log  *eventlog.Log
	svc  *session.Service
	home string
}

func newHarness(t *testing.T, home string) *harness {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(home, "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := fake.Parse([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewBuiltinRegistry(tool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{st: st, log: eventlog.New(st), home: home}
	h.svc, err = session.NewService(context.Background(), session.Deps{
		Store: st, Events: h.log, Providers: providers{fake.New(sc)},
		Toolbox: toolbox.New(reg, filepath.Join(home, "out"), nil, nil),
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) close() {
	h.svc.Shutdown(context.Background())
	h.log.Close()
	h.st.Close()
}

// waitKind reads the session's events from afterSeq until one of kind
// appears, and returns every event read.
func (h *harness) waitKind(t *testing.T, id string, afterSeq int64, kind string, n int) []store.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A cursor reads what a client receives, held events (Unstored) included.
	ready := make(chan struct{}, 1)
	cur, err := h.log.Watch(ctx, id, afterSeq, func() {
		select {
		case ready <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	var out []store.Event
	seen := 0
	for {
		done := false
		got, _, err := cur.Visit(ctx, 0, 0, func(ev *store.Event) error {
			if done {
				return nil // what follows the n-th is not asked for
			}
			e := *ev
			e.Payload = append([]byte(nil), ev.Payload...)
			out = append(out, e)
			if ev.Kind == kind {
				if seen++; seen == n {
					done = true
				}
			}
			return nil
		})
		if done {
			return out
		}
		if err != nil {
			t.Fatalf("no %d×%s event (%v); got %v", n, kind, err, kinds(out))
		}
		if got == 0 {
			select {
			case <-ready:
			case <-ctx.Done():
				t.Fatalf("no %d×%s event; got %v", n, kind, kinds(out))
			}
		}
	}
}

func kinds(evs []store.Event) []string {
	var k []string
	for _, e := range evs {
		k = append(k, e.Kind)
	}
	return k
}

func payload(t *testing.T, e store.Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(e.Payload, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPromptStreamsAndCompletes(t *testing.T) {
	h := newHarness(t, t.TempDir())
	defer h.close()
	id, err := h.svc.Create(context.Background(), session.CreateParams{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Prompt(context.Background(), id, "hello", nil, ""); err != nil {
		t.Fatal(err)
	}
	evs := h.waitKind(t, id, 0, "turn.done", 1)
	deltas := 0
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("seq %d at position %d: not contiguous", e.Seq, i)
		}
		if e.Kind == "message.delta" {
			deltas++
		}
	}
	if deltas == 0 {
		t.Fatalf("no message.delta in %v", kinds(evs))
	}
	if got := payload(t, evs[len(evs)-1])["reason"]; got != "complete" {
		t.Fatalf("turn.done reason %v", got)
	}
	if evs[0].Kind != "turn.started" || evs[1].Kind != "message.user" {
		t.Fatalf("turn opens with %v", kinds(evs[:2]))
	}
}

func TestInterruptDropsQueue(t *testing.T) {
	h := newHarness(t, t.TempDir())
	defer h.close()
	ctx := context.Background()
	id, _ := h.svc.Create(ctx, session.CreateParams{Workdir: t.TempDir()})
	slow, _ := h.svc.Prompt(ctx, id, "slow", nil, "")
	h.waitKind(t, id, 0, "message.delta", 1)
	queued, err := h.svc.Prompt(ctx, id, "hello", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.svc.Interrupt(ctx, id); err != nil {
		t.Fatal(err)
	}
	// A slow turn the interrupt did not stop would end "done".
	evs := h.waitKind(t, id, 0, "turn.done", 2)
	var dropped, doneSlow bool
	for _, e := range evs {
		p := payload(t, e)
		if e.Kind == "turn.dequeued" && p["turnId"] == queued && p["reason"] == "dropped" {
			dropped = true
		}
		if e.Kind == "turn.done" && p["turnId"] == slow && p["reason"] == "interrupted" {
			doneSlow = true
		}
	}
	if !dropped || !doneSlow {
		t.Fatalf("dropped=%v interrupted=%v in %v", dropped, doneSlow, kinds(evs))
	}
}

func TestQueuedPromptRunsAfter(t *testing.T) {
	h := newHarness(t, t.TempDir())
	defer h.close()
	ctx := context.Background()
	id, _ := h.svc.Create(ctx, session.CreateParams{Workdir: t.TempDir()})
	_, _ = h.svc.Prompt(ctx, id, "list", nil, "")
	second, _ := h.svc.Prompt(ctx, id, "hello", nil, "")
	evs := h.waitKind(t, id, 0, "turn.done", 2)
	var sawQueued, sawStarted bool
	for _, e := range evs {
		p := payload(t, e)
		if e.Kind == "turn.queued" && p["turnId"] == second {
			sawQueued = true
		}
		if e.Kind == "turn.dequeued" && p["turnId"] == second && p["reason"] == "started" {
			sawStarted = true
		}
	}
	if !sawQueued || !sawStarted {
		t.Fatalf("queued=%v dequeued=%v: %v", sawQueued, sawStarted, kinds(evs))
	}
}

func TestBadInputs(t *testing.T) {
	h := newHarness(t, t.TempDir())
	defer h.close()
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, []byte("x"), 0o600)
	id, _ := h.svc.Create(ctx, session.CreateParams{Workdir: t.TempDir()})
	for _, c := range []struct {
		name string
		err  error
		code string
	}{
		{"missing workdir", second(h.svc.Create(ctx, session.CreateParams{})), errcode.InvalidParams},
		{"nonexistent workdir", second(h.svc.Create(ctx, session.CreateParams{Workdir: "/no/such/dir"})), errcode.InvalidParams},
		{"workdir is a file", second(h.svc.Create(ctx, session.CreateParams{Workdir: file})), errcode.InvalidParams},
		{"unknown mode", second(h.svc.Create(ctx, session.CreateParams{Workdir: t.TempDir(), Mode: "yolo"})), errcode.InvalidParams},
		{"unknown session prompt", second(h.svc.Prompt(ctx, "s-nope", "hi", nil, "")), errcode.NotFound},
		{"empty text", second(h.svc.Prompt(ctx, id, "  ", nil, "")), errcode.InvalidParams},
		{"setMode bad", second(h.svc.SetMode(ctx, id, "nope")), errcode.InvalidParams},
		{"unknown command", second(h.svc.RunCommand(ctx, id, "nope", "", "")), errcode.NotFound},
		{"interrupt unknown", h.svc.Interrupt(ctx, "s-nope"), errcode.NotFound},
		{"deleteSaved no selector", second(h.svc.DeleteSaved(ctx, session.DeleteSelector{})), errcode.InvalidParams},
		{"deleteSaved two selectors", second(h.svc.DeleteSaved(ctx, session.DeleteSelector{SessionID: id, All: true})), errcode.InvalidParams},
	} {
		if got := errs.CodeOf(c.err); got != c.code {
			t.Errorf("%s: code %q (%v), want %q", c.name, got, c.err, c.code)
		}
	}
	if rows, _ := h.st.ListSessions(ctx, store.SessionFilter{IncludeClosed: true}); len(rows) != 1 {
		t.Fatalf("failed creates left %d sessions, want 1", len(rows))
	}
}

func second[T any](_ T, err error) error { return err }

func TestCompactAndBusy(t *testing.T) {
	h := newHarness(t, t.TempDir())
	defer h.close()
	ctx := context.Background()
	id, _ := h.svc.Create(ctx, session.CreateParams{Workdir: t.TempDir()})
	for i, p := range []string{"hello", "list", "summarise please"} {
		h.svc.Prompt(ctx, id, p, nil, "")
		h.waitKind(t, id, 0, "turn.done", i+1)
	}
	before, _ := h.st.LoadHistory(ctx, id)
	res, err := h.svc.Compact(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	after, _ := h.st.LoadHistory(ctx, id)
	if len(after) >= len(before) || res.After >= res.Before || res.SummaryChars == 0 {
		t.Fatalf("compact: %d→%d messages, %+v", len(before), len(after), res)
	}
	h.svc.Prompt(ctx, id, "slow", nil, "")
	h.waitKind(t, id, 0, "turn.started", 4)
	if _, err := h.svc.Compact(ctx, id, ""); errs.CodeOf(err) != errcode.SessionBusy {
		t.Fatalf("compact while running: %v", err)
	}
}

func TestDeleteSavedSkipsLive(t *testing.T) {
	home := t.TempDir()
	h := newHarness(t, home)
	ctx := context.Background()
	wd := t.TempDir()
	a, _ := h.svc.Create(ctx, session.CreateParams{Workdir: wd})
	b, _ := h.svc.Create(ctx, session.CreateParams{Workdir: wd})
	h.svc.Prompt(ctx, a, "hello", nil, "")
	h.waitKind(t, a, 0, "turn.done", 1)
	h.close()
	// A new daemon run: a and b are saved; resuming b makes it live.
	h = newHarness(t, home)
	defer h.close()
	if _, err := h.svc.Resume(ctx, b, ""); err != nil {
		t.Fatal(err)
	}
	n, err := h.svc.DeleteSaved(ctx, session.DeleteSelector{Workdir: wd})
	if err != nil || n != 1 {
		t.Fatalf("deleted %d (%v), want 1", n, err)
	}
	if evs, _ := h.st.ReadEvents(ctx, a, 0, 100); len(evs) != 0 {
		t.Fatalf("%d events of the deleted session remain", len(evs))
	}
	if _, err := h.st.GetSession(ctx, b); err != nil {
		t.Fatalf("live session deleted: %v", err)
	}
}

// TestDeleteSavedDropsSettings: a session's effort and denyExec, kept in
// the settings table, go with it.
func TestDeleteSavedDropsSettings(t *testing.T) {
	h := newHarness(t, t.TempDir())
	defer h.close()
	ctx := context.Background()
	id, err := h.svc.Create(ctx, session.CreateParams{Workdir: t.TempDir(), Effort: "max", DenyExec: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.svc.Close(ctx, id); err != nil {
		t.Fatal(err)
	}
	if n, err := h.svc.DeleteSaved(ctx, session.DeleteSelector{SessionID: id}); err != nil || n != 1 {
		t.Fatalf("deleted %d (%v), want 1", n, err)
	}
	for _, ns := range []string{"session.effort", "session.denyExec"} {
		if v, err := h.st.GetSetting(ctx, ns, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s of the deleted session: %s %v", ns, v, err)
		}
	}
}

func TestCommands(t *testing.T) {
	h := newHarness(t, t.TempDir())
	defer h.close()
	ctx := context.Background()
	wd := t.TempDir()
	os.MkdirAll(filepath.Join(wd, ".trellis", "commands"), 0o755)
	os.WriteFile(filepath.Join(wd, ".trellis", "commands", "greet.md"), []byte("---\ndescription: Say hello\n---\nhello $ARGUMENTS\n"), 0o644)
	id, _ := h.svc.Create(ctx, session.CreateParams{Workdir: wd})
	cmds, err := h.svc.Commands(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, c := range cmds {
		names[c.Name] = c.Source
	}
	for _, want := range []string{"help", "compact", "mode", "model", "delegate", "clear"} {
		if names[want] != "builtin" {
			t.Errorf("built-in %s missing: %v", want, names)
		}
	}
	if names["greet"] != "project" {
		t.Fatalf("project command missing: %v", names)
	}
	h.svc.Prompt(ctx, id, "/greet world", nil, "")
	evs := h.waitKind(t, id, 0, "turn.done", 1)
	var text string
	for _, e := range evs {
		if e.Kind == "message.done" {
			text = payload(t, e)["text"].(string)
		}
	}
	if !strings.Contains(text, "Hi there") {
		t.Fatalf("project command answer %q", text)
	}
	h.svc.RunCommand(ctx, id, "/mode", "plan", "")
	evs = h.waitKind(t, id, 0, "turn.done", 2)
	if kinds(evs)[len(evs)-2] != "message.done" {
		t.Fatalf("/mode: %v", kinds(evs))
	}
	if s, _ := h.svc.Get(ctx, id); s.Row.Mode != "plan" {
		t.Fatalf("mode after /mode plan: %s", s.Row.Mode)
	}
}

func TestRestartClosesOpenTurn(t *testing.T) {
	home := t.TempDir()
	h := newHarness(t, home)
	ctx := context.Background()
	id, _ := h.svc.Create(ctx, session.CreateParams{Workdir: t.TempDir()})
	turn, _ := h.svc.Prompt(ctx, id, "slow", nil, "")
	evs := h.waitKind(t, id, 0, "message.delta", 1)
	k := evs[len(evs)-1].Seq
	// Simulate a crash: the store and log go away without the turn ending.
	h.log.Close()
	h.st.Close()
	h2 := newHarness(t, home)
	defer h2.close()
	after := h2.waitKind(t, id, k, "turn.done", 1)
	last := after[len(after)-1]
	p := payload(t, last)
	if p["turnId"] != turn || p["reason"] != "interrupted" || p["synthetic"] != true {
		t.Fatalf("after restart: %s", last.Payload)
	}
	h2.svc.Prompt(ctx, id, "hello", nil, "")
	h2.waitKind(t, id, last.Seq, "turn.done", 1)
	hist, _ := h2.st.LoadHistory(ctx, id)
	if len(hist) < 3 {
		t.Fatalf("history after restart has %d messages: the earlier prompt is lost", len(hist))
	}
}

// TestRestartAfterTurnDoneStored: a daemon that stopped after storing a
// turn's turn.done but before recording the turn closed leaves it in its
// record of open turns; the restart closes the other recorded turns (a
// queued prompt: dropped), never that one a second time.
func TestRestartAfterTurnDoneStored(t *testing.T) {
	home := t.TempDir()
	h := newHarness(t, home)
	ctx := context.Background()
	id, _ := h.svc.Create(ctx, session.CreateParams{Workdir: t.TempDir()})
	turn, _ := h.svc.Prompt(ctx, id, "hello", nil, "")
	h.waitKind(t, id, 0, "turn.done", 1)
	h.svc.Shutdown(ctx)
	record, _ := json.Marshal([]string{turn, "t-queued"})
	if err := h.st.PutSetting(ctx, store.Unfenced(), "session.openTurns", id, record); err != nil {
		t.Fatal(err)
	}
	h.log.Close()
	h.st.Close()
	h2 := newHarness(t, home)
	defer h2.close()
	if _, err := h2.st.GetSetting(ctx, "session.openTurns", id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the open turns are still recorded after the restart: %v", err)
	}
	evs, err := h2.st.ReadEvents(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := map[string][]string{}
	for _, ev := range evs {
		if ev.Kind == "turn.done" {
			p := payload(t, ev)
			done[p["turnId"].(string)] = append(done[p["turnId"].(string)], p["reason"].(string))
		}
	}
	if len(done[turn]) != 1 || done[turn][0] != "complete" || len(done["t-queued"]) != 1 || done["t-queued"][0] != "interrupted" {
		t.Fatalf("turn.done reasons by turn after the restart: %v; want one complete for %s, one interrupted for the queued prompt", done, turn)
	}
}

// TestPromptRightAfterTurnDone: a prompt sent as soon as turn.done is seen
// finds the session idle: with whenBusy=reject it is not refused, and it
// starts at once (turn.started, never turn.queued), however quickly it
// follows.
func TestPromptRightAfterTurnDone(t *testing.T) {
	h := newHarness(t, t.TempDir())
	defer h.close()
	ctx := context.Background()
	id, err := h.svc.Create(ctx, session.CreateParams{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := h.log.Subscribe(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	items := sub.Items()
	for i := range 100 {
		if _, err := h.svc.PromptWhenBusy(ctx, id, "hello", nil, "", session.WhenBusyReject); err != nil {
			t.Fatalf("prompt %d, right after the previous turn.done: %v", i, err)
		}
		for it := range items {
			if it.Event == nil {
				continue
			}
			if it.Event.Kind == "turn.queued" {
				t.Fatalf("prompt %d was queued behind a turn whose turn.done was out", i)
			}
			if it.Event.Kind == "turn.done" {
				break
			}
		}
	}
}
