package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"net/http/httptest"

	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/cluster/clustertest"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TestDeposedPollerPostsNoReply: daemon A polls a Telegram binding under
// its lease and is deposed while the message's turn runs, (stale) at the
// database, where daemon B took the binding's lease over, or (past its
// margin) on its own clock. A sends no reply; it says why in a
// gateway.event error, and records no post.
func TestDeposedPollerPostsNoReply(t *testing.T) {
	dsn := pgtest.Server(t)
	for _, tc := range []struct {
		name  string
		lease time.Duration
		// depose runs while the turn of the message runs.
		depose func(t *testing.T, a, b *cluster.Node, dsn, key string)
	}{
		{"stale at the database", time.Minute, func(t *testing.T, a, b *cluster.Node, dsn, key string) {
			clustertest.TakeOver(t, dsn, a, b, key)
		}},
		{"past the margin on its own clock", 3 * time.Second, func(t *testing.T, a, b *cluster.Node, dsn, key string) {
			clustertest.PastMargin(a, key)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := pgtest.FreshSchema(t, dsn)
			ctx := context.Background()
			st, err := postgres.Open(ctx, schema)
			if err != nil {
				t.Fatal(err)
			}
			log := eventlog.New(st)
			t.Cleanup(func() { _ = log.Close(); st.Close() })
			for _, id := range []string{"d-a", "d-b"} {
				if err := st.RegisterDaemon(ctx, store.Daemon{ID: id, GRPCAddr: "127.0.0.1:1"}); err != nil {
					t.Fatal(err)
				}
			}
			// Neither node renews (not started): A goes on believing its
			// lease holds until its own clock says otherwise.
			a := cluster.New(cluster.Options{Store: st, DaemonID: "d-a", GRPCAddr: "127.0.0.1:1", Lease: tc.lease})
			b := cluster.New(cluster.Options{Store: st, DaemonID: "d-b", GRPCAddr: "127.0.0.1:1", Lease: time.Minute})
			ft := &fakeTelegram{token: "123:tg-token", sent: make(chan map[string]any, 4)}
			api := httptest.NewServer(ft)
			defer api.Close()
			home := t.TempDir()
			ss := &fakeSessions{st: st, log: log}
			s, err := New(ctx, Deps{Settings: st, Sessions: ss, Events: log, Leases: a}, Options{
				Home: home, Workdir: home, TelegramAPI: api.URL, PollTimeout: time.Second,
				Getenv: func(string) string { return "123:tg-token" },
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			w := s.Watch(ctx)
			id, err := s.Bind(ctx, BindParams{Platform: PlatformTelegram, CredentialsRef: "env:TG", Target: Target{NewSession: &NewSessionTarget{Workdir: home}}, ChannelID: "42"})
			if err != nil {
				t.Fatal(err)
			}
			ss.onPrompt = func() { tc.depose(t, a, b, schema, leaseKey(id)) }
			ft.push(42, 1, "hi bot")
			deadline := time.After(20 * time.Second)
			for done := false; !done; {
				select {
				case m := <-ft.sent:
					t.Fatalf("the deposed daemon sent a reply: %v", m)
				case ev := <-w.Events():
					if ev.Kind != EventError {
						continue
					}
					msg, _ := ev.Payload["message"].(string)
					if ev.Payload["messageId"] != "101" || !strings.Contains(msg, "not posted") {
						t.Fatalf("error event %+v", ev)
					}
					t.Logf("told: %s", msg)
					done = true
				case <-deadline:
					t.Fatal("no gateway.event error within 20 s")
				}
			}
			select {
			case m := <-ft.sent:
				t.Fatalf("the deposed daemon sent a reply: %v", m)
			default:
			}
			if _, err := st.GetSetting(ctx, PostsNamespace, id); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("a post record of the deposed daemon: %v, want none", err)
			}
			if len(ss.prompts) != 1 {
				t.Fatalf("prompts %v, want the one message's", ss.prompts)
			}
		})
	}
}
