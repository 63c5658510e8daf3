package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/daemon"
)

// transports lists the clients every behaviour test runs against.
func transports() map[string]func(t *testing.T, d *daemon.Daemon) client {
	return map[string]func(t *testing.T, d *daemon.Daemon) client{
		"grpc": func(t *testing.T, d *daemon.Daemon) client { return dialGRPC(t, d) },
		"ws":   func(t *testing.T, d *daemon.Daemon) client { return helloWS(t, d) },
	}
}

func eachTransport(t *testing.T, test func(t *testing.T, d *daemon.Daemon, dial func() client)) {
	for name, dial := range transports() {
		t.Run(name, func(t *testing.T) {
			d := startDaemon(t)
			test(t, d, func() client { return dial(t, d) })
		})
	}
}

func createSession(t testing.TB, c client, params map[string]any) string {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	if _, ok := params["workdir"]; !ok {
		params["workdir"] = t.TempDir()
	}
	var res struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.Call(context.Background(), "session.create", params, &res); err != nil {
		t.Fatalf("session.create: %v", err)
	}
	return res.SessionID
}

func TestPromptHello(t *testing.T) {
	eachTransport(t, func(t *testing.T, d *daemon.Daemon, dial func() client) {
		c := dial()
		id := createSession(t, c, nil)
		var res struct {
			TurnID string `json:"turnId"`
		}
		if err := c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, &res); err != nil {
			t.Fatal(err)
		}
		evs := collect(t, c.Events(id), "turn.done", 1)
		deltas := 0
		for i, ev := range evs {
			if seqOf(ev) != int64(i+1) {
				t.Fatalf("seq %d at position %d: %v", seqOf(ev), i, eventKinds(evs))
			}
			if ev["kind"] == "message.delta" {
				deltas++
			}
			if ev["sessionId"] != id || ev["ts"] == "" {
				t.Fatalf("event envelope: %v", ev)
			}
		}
		last := payloadOf(evs[len(evs)-1])
		if deltas == 0 || last["reason"] != "complete" || last["turnId"] != res.TurnID {
			t.Fatalf("deltas=%d last=%v kinds=%v", deltas, last, eventKinds(evs))
		}
	})
}

func TestInterruptEndsTheTurnAndItsQueue(t *testing.T) {
	eachTransport(t, func(t *testing.T, d *daemon.Daemon, dial func() client) {
		c := dial()
		ctx := context.Background()
		id := createSession(t, c, nil)
		c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "slow"}, nil)
		collect(t, c.Events(id), "message.delta", 1)
		if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Call(ctx, "session.interrupt", map[string]any{"sessionId": id}, nil); err != nil {
			t.Fatal(err)
		}
		// The slow answer takes a minute: a turn the interrupt did not
		// stop would end "done", not "interrupted".
		evs := collect(t, c.Events(id), "turn.done", 2)
		reasons := map[string]int{}
		for _, ev := range evs {
			p := payloadOf(ev)
			if ev["kind"] == "turn.done" {
				reasons[p["reason"].(string)]++
			}
			if ev["kind"] == "turn.dequeued" && p["reason"] != "dropped" {
				t.Errorf("dequeued %v", p)
			}
		}
		if reasons["interrupted"] != 2 {
			t.Fatalf("turn.done reasons %v: %v", reasons, eventKinds(evs))
		}
	})
}

func TestTwoClientsResumeWhileStreaming(t *testing.T) {
	eachTransport(t, func(t *testing.T, d *daemon.Daemon, dial func() client) {
		owner := dial()
		ctx := context.Background()
		id := createSession(t, owner, nil)
		owner.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "many"}, nil)
		collect(t, owner.Events(id), "message.delta", 3)
		var got [2][]map[string]any
		for i := range got {
			c := dial()
			var res struct {
				Events []map[string]any `json:"events"`
			}
			if err := c.Call(ctx, "session.resume", map[string]any{"sessionId": id, "afterSeq": 0}, &res); err != nil {
				t.Fatal(err)
			}
			got[i] = res.Events
			if n := len(res.Events); n == 0 || res.Events[n-1]["kind"] != "turn.done" {
				got[i] = append(got[i], collect(t, c.Events(id), "turn.done", 1)...)
			} else {
				t.Logf("client %d resumed after the turn ended", i)
			}
		}
		for i, evs := range got {
			for j, ev := range evs {
				if seqOf(ev) != int64(j+1) {
					t.Fatalf("client %d: seq %d at position %d", i, seqOf(ev), j)
				}
			}
		}
		if len(got[0]) != len(got[1]) || len(got[0]) < 100 {
			t.Fatalf("clients saw %d and %d events", len(got[0]), len(got[1]))
		}
	})
}

func TestSessionBadInputs(t *testing.T) {
	eachTransport(t, func(t *testing.T, d *daemon.Daemon, dial func() client) {
		c := dial()
		ctx := context.Background()
		id := createSession(t, c, nil)
		for _, tc := range []struct {
			method string
			params map[string]any
			code   string
		}{
			{"session.prompt", map[string]any{"sessionId": "s-0000", "text": "hi"}, "not_found"},
			{"session.create", map[string]any{"workdir": "/does/not/exist"}, "invalid_params"},
			// A huge path is a bad input too (not internal), and its error
			// does not echo it back.
			{"session.create", map[string]any{"workdir": "/" + strings.Repeat("a", 10<<20)}, "invalid_params"},
			{"session.create", map[string]any{"workdir": strings.Repeat("a/", 3000)}, "invalid_params"},
			{"session.list", map[string]any{"workdir": "/" + strings.Repeat("a", 10<<20)}, "invalid_params"},
			// An absent workdir is a managed one; a blank one is no path.
			{"session.create", map[string]any{"workdir": "  "}, "invalid_params"},
			{"session.create", map[string]any{"workdir": t.TempDir(), "mode": "yolo"}, "invalid_params"},
			{"session.prompt", map[string]any{"sessionId": id, "text": ""}, "invalid_params"},
			{"session.setMode", map[string]any{"sessionId": id, "mode": "nope"}, "invalid_params"},
			{"session.resume", map[string]any{"sessionId": "s-0000"}, "not_found"},
			{"session.close", map[string]any{"sessionId": "s-0000"}, "not_found"},
			{"session.deleteSaved", map[string]any{}, "invalid_params"},
			{"command.run", map[string]any{"sessionId": id, "name": "nope"}, "not_found"},
		} {
			err := c.Call(ctx, tc.method, tc.params, nil)
			if err == nil || err.StringCode() != tc.code {
				params, got := fmt.Sprint(tc.params), fmt.Sprint(err)
				t.Errorf("%s %.200s: %.500s (%d bytes), want %s", tc.method, params, got, len(got), tc.code)
			}
		}
		var list struct {
			Sessions []map[string]any `json:"sessions"`
		}
		c.Call(ctx, "session.list", map[string]any{}, &list)
		if len(list.Sessions) != 1 {
			t.Fatalf("bad creates left %d sessions", len(list.Sessions))
		}
		s := list.Sessions[0]
		for _, k := range []string{"sessionId", "workdir", "mode", "provider", "model", "createdAt", "seq", "kind",
			"parentSessionId", "jobId", "agent", "status", "running", "title", "lastPrompt", "lastActivityAt", "pendingApprovals", "workspace"} {
			if _, ok := s[k]; !ok {
				t.Errorf("SessionSummary lacks %s: %v", k, s)
			}
		}
	})
}
