package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TestOpenMigratesOnce pins the migration guard: daemons opening one fresh
// schema at the same time all succeed and each migration is applied once,
// and reopening applies nothing.
func TestOpenMigratesOnce(t *testing.T) {
	dsn := pgtest.FreshSchema(t, pgtest.Server(t))
	ctx := context.Background()
	const daemons = 4
	stores := make([]*Store, daemons)
	errs := make([]error, daemons)
	var wg sync.WaitGroup
	for i := range daemons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = Open(ctx, dsn)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open #%d: %v", i, err)
		}
		defer stores[i].Close()
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	must(t, stores[0].CreateSession(ctx, store.Session{SessionID: "s-1", Kind: store.KindChat}))
	reopened, err := Open(ctx, dsn)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer reopened.Close()
	if _, err := reopened.GetSession(ctx, "s-1"); err != nil {
		t.Errorf("data lost across reopen: %v", err)
	}
	var n int
	must(t, reopened.pool.QueryRow(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n))
	if n != len(ms) {
		t.Errorf("schema_migrations has %d rows, want %d", n, len(ms))
	}
}

func TestOpenErrors(t *testing.T) {
	server := pgtest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tests := []struct {
		name, dsn string
		want      string
	}{
		{"unparsable DSN", "postgres://u:secret@127.0.0.1:5432/test?sslmode=bogus", "sslmode"},
		{"search_path names no schema", pgtest.WithSearchPath(t, server, "no_such_schema"), "search_path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Open(ctx, tc.dsn)
			if err == nil {
				st.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q: want it to mention %q and not the password", err, tc.want)
			}
		})
	}
}

// TestValuesPostgresCannotKeep pins what differs from SQLite: JSON with a
// \u0000 escape (tool output can carry one) round-trips, while a NUL byte
// in a plain string, which a text column cannot hold, is ErrInvalid.
func TestValuesPostgresCannotKeep(t *testing.T) {
	st, err := Open(context.Background(), pgtest.FreshSchema(t, pgtest.Server(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	must(t, st.CreateSession(ctx, store.Session{SessionID: "s-1", Kind: store.KindChat}))
	payload := json.RawMessage(`{"output":"a\u0000b"}`)
	must(t, st.AppendEvents(ctx, store.Unfenced(), []store.Event{{SessionID: "s-1", Seq: 1, Kind: "tool.result", Payload: payload}}))
	evs, err := st.ReadEvents(ctx, "s-1", 0, 0)
	must(t, err)
	if len(evs) != 1 || string(evs[0].Payload) != string(payload) {
		t.Errorf("events = %+v, want one with payload %s", evs, payload)
	}
	err = st.UpdateSession(ctx, store.Unfenced(), "s-1", store.SessionUpdate{Title: ptr("a\x00b")})
	if !errors.Is(err, store.ErrInvalid) {
		t.Errorf("title with a NUL byte: error %v, want ErrInvalid", err)
	}
}

// TestConcurrentWriters pins the row locks: appends to one history from
// several writers never collide on an index, and deleting a session while
// events are appended to it succeeds (the appends that lose fail with
// ErrNotFound) instead of tripping over the foreign key.
func TestConcurrentWriters(t *testing.T) {
	st, err := Open(context.Background(), pgtest.FreshSchema(t, pgtest.Server(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()

	t.Run("history", func(t *testing.T) {
		must(t, st.CreateSession(ctx, store.Session{SessionID: "s-h", Kind: store.KindChat}))
		const writers, each = 4, 10
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					msg := json.RawMessage(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))
					if err := st.AppendHistory(ctx, store.Unfenced(), "s-h", []json.RawMessage{msg}); err != nil {
						t.Errorf("AppendHistory: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		got, err := st.LoadHistory(ctx, "s-h")
		must(t, err)
		if len(got) != writers*each {
			t.Errorf("history has %d messages, want %d", len(got), writers*each)
		}
	})

	t.Run("delete while appending", func(t *testing.T) {
		for round := range 10 {
			id := fmt.Sprintf("s-d%d", round)
			must(t, st.CreateSession(ctx, store.Session{SessionID: id, Kind: store.KindChat}))
			stop, first := make(chan struct{}), make(chan struct{})
			appended := make(chan error, 1)
			go func() {
				for seq := int64(1); ; seq++ {
					if seq == 2 {
						close(first)
					}
					select {
					case <-stop:
						appended <- nil
						return
					default:
					}
					err := st.AppendEvents(ctx, store.Unfenced(), []store.Event{{SessionID: id, Seq: seq, Kind: "x"}})
					if errors.Is(err, store.ErrNotFound) {
						appended <- nil
						return
					}
					if err != nil {
						appended <- err
						return
					}
				}
			}()
			select { // the delete races with appends, not with the first one
			case <-first:
			case err := <-appended:
				t.Fatalf("round %d: first append: %v", round, err)
			}
			n, err := st.DeleteSessions(ctx, store.Unfenced(), []string{id})
			close(stop)
			if err != nil || n != 1 {
				t.Fatalf("round %d: DeleteSessions = %d, %v; want 1, nil", round, n, err)
			}
			if err := <-appended; err != nil {
				t.Fatalf("round %d: append: %v", round, err)
			}
			if last, err := st.LastSeq(ctx, id); err != nil || last != 0 {
				t.Fatalf("round %d: LastSeq after delete = %d, %v", round, last, err)
			}
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestOpenBatchDurability: WithBatchDurability makes the pool's
// connections commit with synchronous_commit off, unless the DSN says.
func TestOpenBatchDurability(t *testing.T) {
	server := pgtest.Server(t)
	for _, tc := range []struct {
		name string
		dsn  string
		opts []Option
		want string
	}{
		{"default", pgtest.FreshSchema(t, server), nil, "on"},
		{"batch", pgtest.FreshSchema(t, server), []Option{WithBatchDurability()}, "off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Open(context.Background(), tc.dsn, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			var got string
			if err := st.pool.QueryRow(context.Background(), `SHOW synchronous_commit`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("synchronous_commit = %q, want %q", got, tc.want)
			}
		})
	}
}
