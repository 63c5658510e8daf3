package session_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/llm/fake"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/toolbox"
)

// refusingStore, once armed, fails every AppendEvents from the next batch
// holding a tool.call on, with refusal, until on is cleared: the store
// filled up (or the lease was lost) just as a tool call was to be recorded.
type refusingStore struct {
	store.Store
	refusal error
	armed   atomic.Bool
	on      atomic.Bool
}

func (s *refusingStore) AppendEvents(ctx context.Context, w store.Writer, evs []store.Event) error {
	for _, e := range evs {
		if e.Kind == "tool.call" && s.armed.CompareAndSwap(true, false) {
			s.on.Store(true)
		}
	}
	if s.on.Load() {
		return s.refusal
	}
	return s.Store.AppendEvents(ctx, w, evs)
}

// TestToolRunsOnlyOnceItsCallIsStored: a tool call whose tool.call event
// the store refuses does not run — on a full disk (the event is held: the
// clients see it, its failed tool.result, error{store_unavailable} and
// turn.done{error}, all stored once the disk has room) and after a lost
// lease (nothing more is stored).
func TestToolRunsOnlyOnceItsCallIsStored(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refusal error
		held    bool
	}{
		{name: "disk full", refusal: errors.New("database or disk is full"), held: true},
		{name: "lease lost", refusal: fmt.Errorf("append: %w", store.ErrLeaseLost)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			home := t.TempDir()
			db, err := sqlite.Open(filepath.Join(home, "t.db"))
			if err != nil {
				t.Fatal(err)
			}
			st := &refusingStore{Store: db}
			sc, err := fake.Parse([]byte(`{"steps":[
 {"match":"write","text":"Writing.","tool_calls":[{"name":"write_file","arguments":{"path":"marker","content":"x"}}]},
 {"after_tool":"write_file","text":"Written."}
],"repeat":true}`))
			if err != nil {
				t.Fatal(err)
			}
			reg, err := tool.NewBuiltinRegistry(tool.Options{})
			if err != nil {
				t.Fatal(err)
			}
			h := &harness{st: db, log: eventlog.New(st), home: home}
			h.svc, err = session.NewService(ctx, session.Deps{
				Store: st, Events: h.log, Providers: providers{fake.New(sc)},
				Toolbox: toolbox.New(reg, filepath.Join(home, "out"), nil, nil),
				Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer h.close()
			wd := t.TempDir()
			id, err := h.svc.Create(ctx, session.CreateParams{Workdir: wd, Mode: "accept"})
			if err != nil {
				t.Fatal(err)
			}
			// A first turn proves the tool runs while the store takes its events.
			if _, err := h.svc.Prompt(ctx, id, "write", nil, ""); err != nil {
				t.Fatal(err)
			}
			h.waitKind(t, id, 0, "turn.done", 1)
			marker := filepath.Join(wd, "marker")
			if err := os.Remove(marker); err != nil {
				t.Fatalf("the first turn did not write the marker: %v", err)
			}
			last, err := h.log.LastSeq(ctx, id)
			if err != nil {
				t.Fatal(err)
			}

			st.refusal = tc.refusal
			st.armed.Store(true)
			if _, err := h.svc.Prompt(ctx, id, "write", nil, ""); err != nil {
				t.Fatal(err)
			}
			if tc.held {
				evs := h.waitKind(t, id, last, "turn.done", 1)
				// The turn is over: a tool that ran would have written by now.
				if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the tool ran although its tool.call was not stored (marker: %v); events %v", err, kinds(evs))
				}
				tail := kinds(evs[len(evs)-4:])
				if strings.Join(tail, " ") != "tool.call tool.result error turn.done" {
					t.Fatalf("the turn ended with %v, want tool.call tool.result error turn.done", tail)
				}
				for _, e := range evs[len(evs)-4:] {
					if !e.Unstored {
						t.Errorf("%s at seq %d was sent as stored", e.Kind, e.Seq)
					}
				}
				res, errEv, done := payload(t, evs[len(evs)-3]), payload(t, evs[len(evs)-2]), payload(t, evs[len(evs)-1])
				if res["ok"] != false || !strings.Contains(fmt.Sprint(res["error"]), "not run") {
					t.Errorf("tool.result = %v, want a failed result saying the call did not run", res)
				}
				if errEv["code"] != "store_unavailable" || done["reason"] != "error" {
					t.Errorf("error %v, turn.done %v; want store_unavailable and reason error", errEv, done)
				}
				// Room again: the held events are stored under the seqs shown.
				st.on.Store(false)
				waitStoredSeq(t, h, id, evs[len(evs)-1].Seq)
				stored, err := db.ReadEvents(ctx, id, last, 100)
				if err != nil {
					t.Fatal(err)
				}
				if got := kinds(stored[len(stored)-4:]); strings.Join(got, " ") != "tool.call tool.result error turn.done" {
					t.Errorf("stored tail %v", got)
				}
			} else {
				waitIdle(t, h.svc, id)
				if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the tool ran although its tool.call was not stored (marker: %v)", err)
				}
				stored, err := db.ReadEvents(ctx, id, last, 100)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range stored {
					if e.Kind == "tool.call" || e.Kind == "tool.result" {
						t.Errorf("a daemon that lost the lease stored %s", e.Kind)
					}
				}
				st.on.Store(false)
			}
		})
	}
}

// waitStoredSeq waits until the log has stored the session's events up to seq.
func waitStoredSeq(t *testing.T, h *harness, id string, seq int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n, err := h.st.LastSeq(context.Background(), id); err == nil && n >= seq {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the held events up to seq %d were not stored within 10 s of the store taking writes again", seq)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitIdle waits until the session runs no turn.
func waitIdle(t *testing.T, svc *session.Service, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for svc.Busy(id) {
		if time.Now().After(deadline) {
			t.Fatal("the session still runs its turn after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
