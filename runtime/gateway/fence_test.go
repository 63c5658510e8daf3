package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/cluster/clustertest"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/gateway/telegramtest"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TestDeposedPollerPostsNoReply: daemon A polls a Telegram binding under
// its lease and is deposed while the message's turn runs, (stale) at the
// database, where daemon B took the binding's lease over, or (past its
// margin) on its own clock. A sends no reply and announces none; it says
// why in a gateway.event error, and records no post.
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
			ft := telegramtest.New(t, "123:tg-token")
			home := t.TempDir()
			ss := &fakeSessions{st: st, log: log}
			s, err := New(ctx, Deps{Settings: st, Sessions: ss, Events: log, Leases: a}, Options{
				Home: home, Workdir: home, TelegramAPI: ft.URL(), PollTimeout: time.Second,
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
			ft.Message(42, 1, "hi bot")
			deadline := time.After(20 * time.Second)
			for done := false; !done; {
				select {
				case m := <-ft.Calls():
					t.Fatalf("the deposed daemon sent a reply: %v", m)
				case ev := <-w.Events():
					if ev.Kind == EventReply {
						t.Fatalf("the deposed daemon announced a reply: %v", ev.Payload)
					}
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
			case m := <-ft.Calls():
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

// hookPosts runs depose ahead of the first post record (PostsNamespace)
// after it is armed.
type hookPosts struct {
	*postgres.Store
	depose atomic.Pointer[func()]
}

func (h *hookPosts) PutSetting(ctx context.Context, w store.Writer, ns, key string, v json.RawMessage) error {
	if ns == PostsNamespace {
		if f := h.depose.Swap(nil); f != nil {
			(*f)()
		}
	}
	return h.Store.PutSetting(ctx, w, ns, key, v)
}

// TestWebhookReplyUnderTheSessionsLease: a webhook message prompts a
// session served by this daemon (A) or, forwarded, by another one (B).
// Deposed from the session after the turn began — (stale) at the
// database, where another daemon took the session over, or (past its
// margin) on A's own clock — the daemon makes no reply: the wait answers
// 409, a gateway.event error says why and no reply event is published.
// The store refuses the post's record where another daemon took the
// session over; past the margin, A's clock refuses the post after the
// record. Kept, the reply is made and recorded.
func TestWebhookReplyUnderTheSessionsLease(t *testing.T) {
	dsn := pgtest.Server(t)
	for _, tc := range []struct {
		name  string
		lease time.Duration // A's
		// owner holds the session's lease as the message comes: A or B.
		owner string
		// depose runs as the reply is recorded (nil: nobody is).
		depose func(t *testing.T, nodes map[string]*cluster.Node, dsn, key string)
		// refused is whether the store refuses the record.
		refused bool
	}{
		{"this daemon's session, stale at the database", time.Minute, "a", func(t *testing.T, n map[string]*cluster.Node, dsn, key string) {
			clustertest.TakeOver(t, dsn, n["a"], n["c"], key)
		}, true},
		{"this daemon's session, past the margin on its own clock", 3 * time.Second, "a", func(t *testing.T, n map[string]*cluster.Node, dsn, key string) {
			clustertest.PastMargin(n["a"], key)
		}, false},
		{"another daemon's session, taken over", time.Minute, "b", func(t *testing.T, n map[string]*cluster.Node, dsn, key string) {
			clustertest.TakeOver(t, dsn, n["b"], n["c"], key)
		}, true},
		{"another daemon's session, kept", time.Minute, "b", nil, false},
		{"this daemon's session, kept", time.Minute, "a", nil, false},
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
			nodes := map[string]*cluster.Node{}
			for _, n := range []string{"a", "b", "c"} {
				id := "d-" + n
				if err := st.RegisterDaemon(ctx, store.Daemon{ID: id, GRPCAddr: "127.0.0.1:1"}); err != nil {
					t.Fatal(err)
				}
				lease := time.Minute
				if n == "a" {
					lease = tc.lease
				}
				// Not started: no node renews.
				nodes[n] = cluster.New(cluster.Options{Store: st, DaemonID: id, GRPCAddr: "127.0.0.1:1", Lease: lease})
			}
			home := t.TempDir()
			writeSecret(t, home, "hook", testSecret, 0o600)
			ss := &fakeSessions{st: st, log: log}
			posts := &hookPosts{Store: st}
			s, err := New(ctx, Deps{Settings: posts, Sessions: ss, Events: log, Leases: nodes["a"]}, Options{Home: home, Workdir: home})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			sid, err := ss.Create(ctx, session.CreateParams{Workdir: home})
			if err != nil {
				t.Fatal(err)
			}
			if got, err := nodes[tc.owner].AcquireResource(ctx, sid, nil); err != nil || !got {
				t.Fatalf("%s takes the session's lease: %v %v", tc.owner, got, err)
			}
			id, err := s.Bind(ctx, BindParams{Platform: PlatformWebhook, CredentialsRef: "secret:hook", Target: Target{Session: sid}})
			if err != nil {
				t.Fatal(err)
			}
			w := s.Watch(ctx)
			if tc.depose != nil {
				depose := func() { tc.depose(t, nodes, schema, sid) }
				posts.depose.Store(&depose)
			}
			resp, body := post(t, s, id, testSecret, WebhookMessage{Text: "hi", MessageID: "m1", Wait: true})
			_, recErr := st.GetSetting(ctx, PostsNamespace, id)
			if tc.depose == nil {
				var r WebhookReply
				if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &r) != nil || r.Text != "echo: hi" {
					t.Fatalf("kept: %d %s, want the reply", resp.StatusCode, body)
				}
				if recErr != nil {
					t.Fatalf("the reply made was not recorded: %v", recErr)
				}
			} else {
				if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), "not posted") {
					t.Fatalf("deposed: %d %s, want 409 not posted", resp.StatusCode, body)
				}
				if tc.refused && !errors.Is(recErr, store.ErrNotFound) {
					t.Fatalf("a post record of the deposed daemon: %v, want none", recErr)
				}
			}
			// The events: the message, then the reply or an error, never both.
			want := EventReply
			if tc.depose != nil {
				want = EventError
			}
			for seen := false; !seen; {
				select {
				case ev := <-w.Events():
					switch ev.Kind {
					case EventMessage:
					case want:
						t.Logf("%s: %v", ev.Kind, ev.Payload)
						seen = true
					default:
						t.Fatalf("event %s %v, want %s", ev.Kind, ev.Payload, want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("no gateway.event %s within 10 s", want)
				}
			}
		})
	}
}
