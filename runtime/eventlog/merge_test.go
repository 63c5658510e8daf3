package eventlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/store"
)

// storedTexts returns each stored event of the session as "kind:text"
// (text from a {"text"} payload, "" otherwise), checking seqs 1..n.
func storedTexts(t *testing.T, st store.EventStore, sessionID string) []string {
	t.Helper()
	evs, err := st.ReadEvents(context.Background(), sessionID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(evs))
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("%s: stored event %d has seq %d (gap or duplicate)", sessionID, i, e.Seq)
		}
		var p struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(e.Payload, &p)
		out[i] = e.Kind + ":" + p.Text
	}
	return out
}

// With a linger far longer than the test, every chunk is queued when the
// next one comes: consecutive chunks of one kind become one event, a chunk
// of another kind or any other event starts a new one.
func TestEnqueueTextMergesQueuedChunks(t *testing.T) {
	st := &countingEvents{memEvents: newMemEvents("s-1", "s-2")}
	l := newLog(t, st, eventlog.WithLinger(time.Hour))
	warmUp(t, l, st.memEvents)
	st.commits.Store(0)
	ctx := context.Background()
	var waits []func() (store.Event, error)
	text := func(sid, kind, s string) {
		t.Helper()
		w, err := l.EnqueueText(ctx, sid, kind, s)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, w)
	}
	for i := 0; i < 5; i++ {
		text("s-1", "message.reasoning", fmt.Sprintf("r%d ", i))
		text("s-2", "message.delta", fmt.Sprintf("x%d ", i)) // another session does not break s-1's run
	}
	for i := 0; i < 100; i++ {
		text("s-1", "message.delta", fmt.Sprintf("d%d ", i))
	}
	if _, err := l.Enqueue(ctx, "s-1", "tool.progress", map[string]string{"chunk": "p"}); err != nil {
		t.Fatal(err)
	}
	text("s-1", "message.delta", "after ")
	text("s-1", "message.delta", "progress")
	if _, err := l.Append(ctx, "s-1", "turn.done", map[string]string{"reason": "complete"}); err != nil {
		t.Fatal(err)
	}
	if n := st.commits.Load(); n != 1 {
		t.Errorf("%d transactions, want 1", n)
	}
	var d strings.Builder
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&d, "d%d ", i)
	}
	want := []string{"message.reasoning:r0 r1 r2 r3 r4 ", "message.delta:" + d.String(), "tool.progress:", "message.delta:after progress", "turn.done:"}
	if got := storedTexts(t, st, "s-1"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("s-1 stored\n%q\nwant\n%q", got, want)
	}
	if got := storedTexts(t, st, "s-2"); len(got) != 1 || got[0] != "message.delta:x0 x1 x2 x3 x4 " {
		t.Errorf("s-2 stored %q", got)
	}
	// Every chunk's wait reports the event it joined.
	for i, w := range waits {
		ev, err := w()
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(ev.Payload, &p)
		if ev.Seq < 1 || p.Text == "" {
			t.Fatalf("wait %d: seq %d payload %s", i, ev.Seq, ev.Payload)
		}
	}
	if last, _ := l.LastSeq(ctx, "s-1"); last != 5 {
		t.Errorf("LastSeq = %d, want 5", last)
	}
}

// A chunk the writer has taken is not merged into: chunks that each wait
// for their commit stay one event each.
func TestEnqueueTextCommittedChunksStaySeparate(t *testing.T) {
	st := newMemEvents("s-1")
	l := newLog(t, st, eventlog.WithLinger(0))
	for i := 0; i < 10; i++ {
		w, err := l.EnqueueText(context.Background(), "s-1", "message.delta", "c")
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := w(); err != nil || ev.Seq != int64(i+1) {
			t.Fatalf("chunk %d: seq %d, %v", i, ev.Seq, err)
		}
	}
	if got := storedTexts(t, st, "s-1"); len(got) != 10 {
		t.Fatalf("%d events stored, want 10", len(got))
	}
}

func TestEnqueueTextMergeLimit(t *testing.T) {
	for _, tt := range []struct {
		max  int
		want []string
	}{
		{10, []string{"aaaabbbb", "ccccdddd", "eeee"}},
		{0, []string{"aaaa", "bbbb", "cccc", "dddd", "eeee"}}, // merging off
	} {
		st := newMemEvents("s-1")
		l := newLog(t, st, eventlog.WithLinger(time.Hour), eventlog.WithTextMerge(tt.max))
		warmUp(t, l, st)
		for _, c := range []string{"aaaa", "bbbb", "cccc", "dddd", "eeee"} {
			if _, err := l.EnqueueText(context.Background(), "s-1", "message.delta", c); err != nil {
				t.Fatal(err)
			}
		}
		l.Close()
		got := storedTexts(t, st, "s-1")
		for i := range got {
			got[i] = strings.TrimPrefix(got[i], "message.delta:")
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("max %d: stored %q, want %q", tt.max, got, tt.want)
		}
	}
}

// A merged event's payload goes through the payload form again, and text
// that JSON escapes comes out as it went in.
func TestEnqueueTextMergedPayloadForm(t *testing.T) {
	st := newMemEvents("s-1")
	var calls atomic.Int64
	form := func(kind string, payload json.RawMessage) (json.RawMessage, error) {
		calls.Add(1)
		var p map[string]any
		if err := json.Unmarshal(payload, &p); err != nil {
			return nil, err
		}
		p["form"] = kind
		return json.Marshal(p)
	}
	l := newLog(t, st, eventlog.WithLinger(time.Hour), eventlog.WithPayloadForm(form))
	warmUp(t, l, st)
	calls.Store(0)
	chunks := []string{"<a href=\"x\">", " & ", "ünï\ncode ", "\u2028 end"}
	for _, c := range chunks {
		if _, err := l.EnqueueText(context.Background(), "s-1", "message.delta", c); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	evs, _ := st.ReadEvents(context.Background(), "s-1", 0, 0)
	if len(evs) != 1 {
		t.Fatalf("%d events, want 1", len(evs))
	}
	var p struct {
		Text string `json:"text"`
		Form string `json:"form"`
	}
	if err := json.Unmarshal(evs[0].Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.Text != strings.Join(chunks, "") || p.Form != "message.delta" {
		t.Errorf("stored payload %s", evs[0].Payload)
	}
	if n := calls.Load(); n != 2 { // the first chunk, then the merged event
		t.Errorf("payload form called %d times, want 2", n)
	}
}

// A chunk merged into an event whose commit the store refuses fails with
// it; the next chunk starts a new event with the seq the failed one did
// not use. If the store only cannot write (held events), the merged event
// is held with its seq and stored later, text and all.
func TestEnqueueTextMergedChunkFailsWithItsEvent(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cause error
		want  []string
	}{
		{"refused", fmt.Errorf("%w: another daemon", store.ErrLeaseLost), []string{"message.delta:kept", "turn.done:"}},
		{"held", errInjected, []string{"message.delta:merged too", "error:", "message.delta:kept", "turn.done:"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := newMemEvents("s-1")
			var failNext atomic.Bool
			fs := &flakyStore{st, func([]store.Event) bool { return failNext.Swap(false) }}
			l := newLog(t, &causeStore{fs, tt.cause}, eventlog.WithLinger(time.Hour))
			warmUp(t, l, st)
			ctx := context.Background()
			w1, _ := l.EnqueueText(ctx, "s-1", "message.delta", "merged ")
			w2, _ := l.EnqueueText(ctx, "s-1", "message.delta", "too")
			failNext.Store(true)
			if _, err := l.Append(ctx, "s-1", "error", map[string]string{"code": "x"}); !errors.Is(err, tt.cause) {
				t.Fatalf("Append after the chunks: %v, want %v", err, tt.cause)
			}
			for _, w := range []func() (store.Event, error){w1, w2} {
				ev, err := w()
				if !errors.Is(err, tt.cause) {
					t.Fatalf("merged chunk: %v, want %v", err, tt.cause)
				}
				if held := errors.Is(err, eventlog.ErrHeld); held && (!ev.Unstored || ev.Seq != 1 || string(ev.Payload) != `{"text":"merged too"}`) {
					t.Fatalf("held merged chunk: %+v %s", ev, ev.Payload)
				}
			}
			w3, _ := l.EnqueueText(ctx, "s-1", "message.delta", "kept")
			if _, err := l.Append(ctx, "s-1", "turn.done", map[string]string{"reason": "error"}); err != nil {
				t.Fatal(err)
			}
			if ev, err := w3(); err != nil || ev.Seq != int64(len(tt.want)-1) {
				t.Fatalf("chunk after the failure: seq %d, %v; want %d", ev.Seq, err, len(tt.want)-1)
			}
			if got := storedTexts(t, st, "s-1"); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("stored %q, want %q", got, tt.want)
			}
		})
	}
}

// causeStore turns flakyStore's injected failure into cause.
type causeStore struct {
	*flakyStore
	cause error
}

func (c *causeStore) AppendEvents(ctx context.Context, w store.Writer, evs []store.Event) error {
	if err := c.flakyStore.AppendEvents(ctx, w, evs); err != nil {
		if errors.Is(err, errInjected) {
			return c.cause
		}
		return err
	}
	return nil
}

// Many sessions stream text at once against SQLite with the default
// linger: whatever got merged, each session's stored chunks add up to what
// it sent, in order, with no gap, and every event of another kind is there.
func TestEnqueueTextConcurrentSessions(t *testing.T) {
	const sessions, chunks = 6, 400
	ids := sessionIDs(sessions)
	st := openStore(t, ids...)
	l := newLog(t, st, eventlog.WithTextMerge(64))
	ctx := context.Background()
	var wg sync.WaitGroup
	errc := make(chan error, sessions)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < chunks; i++ {
				if _, err := l.EnqueueText(ctx, id, "message.delta", fmt.Sprintf("%d,", i)); err != nil {
					errc <- err
					return
				}
				if i%50 == 49 {
					if _, err := l.Append(ctx, id, "usage", map[string]int{"i": i}); err != nil {
						errc <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 0; i < chunks; i++ {
		fmt.Fprintf(&want, "%d,", i)
	}
	for _, id := range ids {
		var text strings.Builder
		usages := 0
		for _, s := range storedTexts(t, st, id) {
			kind, txt, _ := strings.Cut(s, ":")
			switch kind {
			case "message.delta":
				if len(txt) > 64 {
					t.Fatalf("%s: a merged chunk of %d bytes, limit 64", id, len(txt))
				}
				text.WriteString(txt)
			case "usage":
				usages++
			}
		}
		if text.String() != want.String() || usages != chunks/50 {
			t.Fatalf("%s: text %q…, %d usage events", id, clip(text.String()), usages)
		}
	}
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80]
	}
	return s
}
