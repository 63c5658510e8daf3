package gateway

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/gateway/slacktest"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TestSlackAcrossDaemons: two daemons share a PostgreSQL store and a
// Slack binding. In Events mode Slack's request and its retry reach
// different daemons at once: the message is answered once. In Socket Mode
// only the daemon holding the binding's lease opens a connection, and the
// message it brings is answered once.
func TestSlackAcrossDaemons(t *testing.T) {
	dsn := pgtest.Server(t)
	for _, mode := range []string{SlackModeEvents, SlackModeSocket} {
		t.Run(mode, func(t *testing.T) {
			schema := pgtest.FreshSchema(t, dsn)
			ctx := context.Background()
			st, err := postgres.Open(ctx, schema)
			if err != nil {
				t.Fatal(err)
			}
			log := eventlog.New(st)
			t.Cleanup(func() { _ = log.Close(); st.Close() })
			home := t.TempDir()
			writeSecret(t, home, "slack", "bot_token="+slackBot+"\nsigning_secret="+slackSigning+"\napp_token="+slackApp, 0o600)
			fs := slacktest.New(t, slackBot, slackApp)
			nodes := map[string]*cluster.Node{}
			for _, n := range []string{"a", "b"} {
				if err := st.RegisterDaemon(ctx, store.Daemon{ID: "d-" + n, GRPCAddr: "127.0.0.1:1"}); err != nil {
					t.Fatal(err)
				}
				nodes[n] = cluster.New(cluster.Options{Store: st, DaemonID: "d-" + n, GRPCAddr: "127.0.0.1:1", Lease: time.Minute})
			}
			sessions := map[string]*streamSessions{}
			start := func(n string) *Service {
				sessions[n] = &streamSessions{fakeSessions: &fakeSessions{st: st, log: log}}
				s, err := New(ctx, Deps{Settings: st, Sessions: sessions[n], Events: log, Leases: nodes[n]}, Options{
					Home: home, Workdir: home, SlackAPI: fs.API(), SlackUpdateInterval: time.Hour,
					Getenv: func(string) string { return "" },
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				return s
			}
			a := start("a")
			// The conversation's session, served by daemon A.
			sid, err := sessions["a"].Create(ctx, session.CreateParams{Workdir: home})
			if err != nil {
				t.Fatal(err)
			}
			if got, err := nodes["a"].AcquireResource(ctx, sid, nil); err != nil || !got {
				t.Fatalf("a takes the session's lease: %v %v", got, err)
			}
			id, err := a.Bind(ctx, BindParams{Platform: PlatformSlack, CredentialsRef: "slack", Mode: mode, Target: Target{Session: sid}})
			if err != nil {
				t.Fatal(err)
			}
			ev := slacktest.Event("Ev30", "message", "C0001", "U0001", "once please", "1700000003.000100", "")
			if mode == SlackModeSocket {
				sock := fs.Socket(t) // A's: it holds the binding's lease
				b := start("b")
				if got, err := nodes["b"].AcquireResource(ctx, leaseKey(id), nil); err != nil || got {
					t.Fatalf("b takes the binding's lease A holds: %v %v", got, err)
				}
				sock.Send(t, map[string]any{"type": "hello"})
				sock.Send(t, map[string]any{"envelope_id": "env-1", "type": "events_api", "payload": ev})
				sock.WantAck(t, "env-1")
				fs.Until(t, "a post", func(c slacktest.Call) bool { return c.Body["text"] == "echo: once please" })
				b.Close()
			} else {
				b := start("b")
				var wg sync.WaitGroup
				for _, s := range []*Service{a, b} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						hdr := map[string]string{}
						if s == b {
							hdr[SlackRetryHeader] = "1"
						}
						if code, body := slacktest.Request(t, s.Addr(), id, slackSigning, time.Now(), ev, false, hdr); code != http.StatusOK {
							t.Errorf("event: %d %s", code, body)
						}
					}()
				}
				wg.Wait()
				fs.Until(t, "a post", func(c slacktest.Call) bool { return c.Body["text"] == "echo: once please" })
				b.Close()
			}
			a.Close() // every request's work is done
			t.Logf("calls %v", fs.Methods())
			n := 0
			for _, ss := range sessions {
				for _, p := range ss.allPrompts() {
					n += len(p)
				}
			}
			if n != 1 {
				t.Fatalf("%d prompts across the daemons, want 1", n)
			}
			if got := fs.Count("chat.postMessage"); got != 1 {
				t.Fatalf("%d chat.postMessage (%v), want 1", got, fs.Methods())
			}
			if mode == SlackModeSocket && fs.Count("apps.connections.open") != 1 {
				t.Fatalf("calls %v, want one connection, A's", fs.Methods())
			}
		})
	}
}
