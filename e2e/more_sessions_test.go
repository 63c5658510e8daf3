package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/protocol/errcode"
)

func TestCompactThroughTransports(t *testing.T) {
	eachTransport(t, func(t *testing.T, d *daemon.Daemon, dial func() client) {
		c := dial()
		ctx := context.Background()
		id := createSession(t, c, nil)
		for i, p := range []string{"hello", "run ls please", "hello again"} {
			_ = i
			c.Call(ctx, "session.setMode", map[string]any{"sessionId": id, "mode": "auto"}, nil)
			c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": p}, nil)
			collect(t, c.Events(id), "turn.done", 1)
		}
		var res struct {
			Before, After, SummaryChars int
		}
		if err := c.Call(ctx, "session.compact", map[string]any{"sessionId": id}, &res); err != nil {
			t.Fatal(err)
		}
		if res.After >= res.Before || res.SummaryChars == 0 {
			t.Fatalf("compact: %+v", res)
		}
		evs := collect(t, c.Events(id), "compaction", 1)
		if got := findKind(evs, "compaction.started"); len(got) != 1 || got[0]["reason"] != "manual" {
			t.Fatalf("compaction.started: %v", got)
		}
		c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "slow"}, nil)
		collect(t, c.Events(id), "message.delta", 1)
		if err := c.Call(ctx, "session.compact", map[string]any{"sessionId": id}, nil); err == nil || err.StringCode() != "session_busy" {
			t.Fatalf("compact while running: %v, want session_busy", err)
		}
	})
}

func TestDeleteSavedThroughTransports(t *testing.T) {
	eachTransport(t, func(t *testing.T, d *daemon.Daemon, dial func() client) {
		c := dial()
		ctx := context.Background()
		wd := t.TempDir()
		live := createSession(t, c, map[string]any{"workdir": wd})
		closed := createSession(t, c, map[string]any{"workdir": wd})
		c.Call(ctx, "session.prompt", map[string]any{"sessionId": closed, "text": "hello"}, nil)
		collect(t, c.Events(closed), "turn.done", 1)
		if err := c.Call(ctx, "session.close", map[string]any{"sessionId": closed}, nil); err != nil {
			t.Fatal(err)
		}
		var res struct {
			Deleted int `json:"deleted"`
		}
		if err := c.Call(ctx, "session.deleteSaved", map[string]any{"workdir": wd}, &res); err != nil {
			t.Fatal(err)
		}
		if res.Deleted != 1 {
			t.Fatalf("deleted %d, want 1 (the closed one; the live one is skipped)", res.Deleted)
		}
		if err := c.Call(ctx, "session.resume", map[string]any{"sessionId": closed}, nil); err == nil || err.StringCode() != "not_found" {
			t.Fatalf("resume of a deleted session: %v", err)
		}
		if err := c.Call(ctx, "session.resume", map[string]any{"sessionId": live}, nil); err != nil {
			t.Fatalf("the live session was deleted: %v", err)
		}
		if err := c.Call(ctx, "session.deleteSaved", map[string]any{"sessionId": live, "all": true}, nil); err == nil || err.StringCode() != "invalid_params" {
			t.Fatalf("two selectors: %v", err)
		}
	})
}

func TestBackendAllowlistAndTools(t *testing.T) {
	eachTransport(t, func(t *testing.T, d *daemon.Daemon, dial func() client) {
		c := dial()
		ctx := context.Background()
		id := createSession(t, c, nil)
		if err := c.Call(ctx, "backend.set", map[string]any{"sessionId": id, "kind": "local"}, nil); err != nil {
			t.Fatal(err)
		}
		evs := collect(t, c.Events(id), "backend.changed", 1)
		if b := findKind(evs, "backend.changed")[0]["backend"].(map[string]any); b["kind"] != "local" {
			t.Fatalf("backend.changed: %v", b)
		}
		// A docker or ssh config that cannot work is invalid_params with
		// the reason (e2e/docker_test.go and ssh_test.go run real ones); a
		// kind the protocol does not name is invalid_params.
		err := c.Call(ctx, "backend.set", map[string]any{"sessionId": id, "kind": "docker", "config": map[string]any{"network": "none"}}, nil)
		if err == nil || err.StringCode() != "invalid_params" || !strings.Contains(err.Message, "image is required") {
			t.Fatalf("backend docker without image: %v", err)
		}
		err = c.Call(ctx, "backend.set", map[string]any{"sessionId": id, "kind": "ssh", "config": map[string]any{"host": "x"}}, nil)
		if err == nil || err.StringCode() != "invalid_params" || !strings.Contains(err.Message, "user is required") {
			t.Fatalf("backend ssh without user: %v", err)
		}
		if err := c.Call(ctx, "backend.set", map[string]any{"sessionId": id, "kind": "moon"}, nil); err == nil || err.StringCode() != "invalid_params" {
			t.Fatalf("backend moon: %v", err)
		}

		var added struct {
			PatternID string `json:"patternId"`
		}
		if err := c.Call(ctx, "permission.allowlist.add", map[string]any{"pattern": "shell(git status*)", "scope": "always"}, &added); err != nil {
			t.Fatal(err)
		}
		var list struct {
			Patterns []map[string]any `json:"patterns"`
		}
		c.Call(ctx, "permission.allowlist.list", map[string]any{}, &list)
		if len(list.Patterns) != 1 || list.Patterns[0]["pattern"] != "shell(git status*)" || list.Patterns[0]["patternId"] != added.PatternID {
			t.Fatalf("allowlist: %v", list.Patterns)
		}
		if err := c.Call(ctx, "permission.allowlist.add", map[string]any{"pattern": "shell(("}, nil); err == nil || err.StringCode() != "invalid_params" {
			t.Fatalf("bad pattern: %v", err)
		}
		if err := c.Call(ctx, "permission.allowlist.remove", map[string]any{"patternId": added.PatternID}, nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Call(ctx, "permission.allowlist.remove", map[string]any{"patternId": added.PatternID}, nil); err == nil || err.StringCode() != "not_found" {
			t.Fatalf("remove twice: %v", err)
		}

		var tools struct {
			Tools []map[string]any `json:"tools"`
		}
		c.Call(ctx, "tool.list", map[string]any{"sessionId": id}, &tools)
		byName := map[string]map[string]any{}
		for _, tl := range tools.Tools {
			byName[tl["name"].(string)] = tl
		}
		for _, n := range []string{"shell", "read_file", "list_dir", "glob", "grep", "write_file", "edit_file", "web_fetch", "web_search"} {
			if byName[n] == nil {
				t.Errorf("tool.list lacks %s", n)
			}
		}
		if ws := byName["web_search"]; ws["state"] != "inactive" || !strings.Contains(ws["reason"].(string), "search") {
			t.Errorf("web_search: %v", ws)
		}
		if sh := byName["shell"]; sh["permissionTag"] != "exec" || sh["state"] != "active" {
			t.Errorf("shell: %v", sh)
		}
	})
}

// TestClientIDRebinding: a client that reconnects with the same clientId
// becomes the origin of the sessions its earlier connection created, so
// their approval requests reach it.
func TestClientIDRebinding(t *testing.T) {
	d := startDaemon(t)
	hello := func() *wsClient {
		c := dialWS(t, d)
		if err := c.Call(context.Background(), "system.hello", map[string]any{
			"token": d.Token(), "clientVersion": "test", "protocolVersion": "1.0.0", "clientId": "ide-42",
		}, nil); err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := hello()
	id := createSession(t, first, nil)
	watcher := helloWS(t, d)
	first.Close()
	waitConnections(t, watcher, 1)
	second := hello()
	asked := make(chan map[string]any, 1)
	second.onRequest = func(method string, params json.RawMessage) (any, *errcode.Error) {
		var p map[string]any
		_ = json.Unmarshal(params, &p)
		asked <- p
		return map[string]any{"decision": "allow"}, nil
	}
	ctx := context.Background()
	if err := second.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "run ls"}, nil); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, second.Events(id), "turn.done", 1)
	select {
	case p := <-asked:
		if p["sessionId"] != id {
			t.Fatalf("asked about %v", p)
		}
	default:
		t.Fatalf("the reconnected client was not asked; events %v", eventKinds(evs))
	}
	if r := findKind(evs, "tool.result"); len(r) != 1 || r[0]["ok"] != true {
		t.Fatalf("tool.result %v", r)
	}
}
