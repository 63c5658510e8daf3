package gateway

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/cluster/clustertest"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/gateway/discordtest"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TestDeposedDiscordPostsNoReply: daemon A holds a Discord binding's lease
// and runs its gateway connection; it is deposed while a message's turn
// runs, (stale) at the database, where daemon B took the lease over, or
// (past its margin) on its own clock. A posts no reply, announces none,
// says why in a gateway.event error and records no post.
func TestDeposedDiscordPostsNoReply(t *testing.T) {
	dsn := pgtest.Server(t)
	for _, tc := range []struct {
		name   string
		lease  time.Duration
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
			a := cluster.New(cluster.Options{Store: st, DaemonID: "d-a", GRPCAddr: "127.0.0.1:1", Lease: tc.lease})
			b := cluster.New(cluster.Options{Store: st, DaemonID: "d-b", GRPCAddr: "127.0.0.1:1", Lease: time.Minute})
			fd := discordtest.New(t, dcToken)
			home := t.TempDir()
			broker := approval.NewBroker(st, func(string) string { return "" }, slog.Default(), approval.BrokerOptions{})
			t.Cleanup(broker.Close)
			ss := &dcStreamSessions{fakeSessions: &fakeSessions{st: st, log: log}, broker: broker}
			s, err := New(ctx, Deps{Settings: st, Sessions: ss, Events: log, Leases: a, Approvals: broker}, Options{
				Home: home, Workdir: home, Getenv: func(string) string { return dcToken },
				Discord: DiscordOptions{API: fd.API(), EditInterval: 50 * time.Millisecond},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			w := s.Watch(ctx)
			id, err := s.Bind(ctx, BindParams{Platform: PlatformDiscord, CredentialsRef: "env:DC", Target: Target{NewSession: &NewSessionTarget{Workdir: home}}, ChannelID: dcChannel})
			if err != nil {
				t.Fatal(err)
			}
			fd.Live()
			ss.mu.Lock()
			ss.onPrompt = func() { tc.depose(t, a, b, schema, leaseKey(id)) }
			ss.mu.Unlock()
			mid := fd.Message(dcChannel, "500000000000000001", "hi bot", false)
			deadline := time.After(20 * time.Second)
			for done := false; !done; {
				select {
				case ev := <-w.Events():
					if ev.Kind == EventReply {
						t.Fatalf("the deposed daemon announced a reply: %v", ev.Payload)
					}
					if ev.Kind != EventError {
						continue
					}
					msg, _ := ev.Payload["message"].(string)
					if ev.Payload["messageId"] != mid || !strings.Contains(msg, "not posted") {
						t.Fatalf("error event %+v", ev)
					}
					t.Logf("told: %s", msg)
					done = true
				case <-deadline:
					t.Fatal("no gateway.event error within 20 s")
				}
			}
			fd.Mu.Lock()
			posts := fd.Posts
			fd.Mu.Unlock()
			if len(posts) != 0 {
				t.Fatalf("the deposed daemon posted %+v", posts)
			}
			if _, err := st.GetSetting(ctx, PostsNamespace, id); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("a post record of the deposed daemon: %v, want none", err)
			}
			if n := ss.count(); n != 1 {
				t.Fatalf("prompts %v, want the one message's", ss.prompts)
			}
		})
	}
}
