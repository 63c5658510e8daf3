package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/facade/methods"
)

// restRoute is one REST route of proto/trellis/v1/http.yaml.
type restRoute struct {
	Verb, Path string // "GET" or "POST"; "/v1/session/list"
}

// restRoutes reads the REST route of every JSON-RPC method from http.yaml
// (the same file grpc-gateway is generated from), keyed by method name.
func restRoutes(t testing.TB) map[string]restRoute {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "proto", "trellis", "v1", "http.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rule := regexp.MustCompile(`(?m)^\s*- selector: (\S+)\n\s*(get|post): (\S+)`)
	bySelector := map[string]restRoute{}
	for _, m := range rule.FindAllStringSubmatch(string(b), -1) {
		bySelector[m[1]] = restRoute{Verb: strings.ToUpper(m[2]), Path: m[3]}
	}
	out := map[string]restRoute{}
	for _, name := range methods.Names() {
		sel := strings.ReplaceAll(strings.TrimPrefix(methods.Lookup(name).FullMethod, "/"), "/", ".")
		if r, ok := bySelector[sel]; ok {
			out[name] = r
		}
	}
	return out
}

// restCall calls method's REST route with params: a POST carries them as
// the JSON body, a GET as the query string (arrays as repeated keys). The
// exchange is validated against the OpenAPI document.
func restCall(t testing.TB, d *daemon.Daemon, route restRoute, params map[string]any) (int, []byte) {
	t.Helper()
	u := fmt.Sprintf("http://127.0.0.1:%d%s", d.HTTPPort(), route.Path)
	var body []byte
	query := url.Values{}
	if route.Verb == "GET" {
		for k, v := range params {
			switch x := v.(type) {
			case []any:
				for _, e := range x {
					query.Add(k, fmt.Sprint(e))
				}
			default:
				query.Set(k, fmt.Sprint(v))
			}
		}
		if len(query) > 0 {
			u += "?" + query.Encode()
		}
	} else {
		body, _ = json.Marshal(params)
	}
	req, err := http.NewRequest(route.Verb, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.Token())
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	checkOpenAPI(t, route.Verb, u, body, resp.StatusCode, resp.Header, out)
	return resp.StatusCode, out
}

// wsRaw calls method over JSON-RPC and returns the result or the error
// object as JSON.
func wsRaw(t testing.TB, c *wsClient, method string, params map[string]any) (result json.RawMessage, errObj json.RawMessage) {
	t.Helper()
	var res json.RawMessage
	if e := c.Call(context.Background(), method, params, &res); e != nil {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		return nil, b
	}
	return res, nil
}

// canonical parses JSON and replaces the value of every key in mask (at any
// depth) with "<masked>", for values that differ by nature between two
// calls (a new id, a timestamp).
func canonical(t testing.TB, b []byte, mask []string) string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	masked := map[string]bool{}
	for _, k := range mask {
		masked[k] = true
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if masked[k] && e != nil {
					x[k] = "<masked>"
				} else {
					x[k] = walk(e)
				}
			}
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		}
		return v
	}
	out, _ := json.MarshalIndent(walk(v), "", " ")
	return string(out)
}

// parityCase is one call of a method made over both transports.
type parityCase struct {
	name string
	// params returns the params for one transport ("rest" or "ws"): the
	// same for reads; for a call that changes state, each transport may
	// act on its own object (its own session, a name of its own).
	params func(tr string) map[string]any
	// mask lists keys whose values differ by nature between the two calls.
	mask []string
	// wantError says the call must fail (with the same error both ways):
	// its data.code, or "*" for any.
	wantError string
	// fresh runs the JSON-RPC call on a new connection that has not said
	// hello (system.hello's cases).
	fresh bool
}

func same(p map[string]any) func(string) map[string]any {
	return func(string) map[string]any { return p }
}

// TestRESTEqualsJSONRPC runs every method that has a REST route over REST
// and over JSON-RPC on WebSocket against one daemon and compares the JSON:
// the REST body must be the JSON-RPC result, and a REST error body the
// JSON-RPC error object (code, message, data), for successes and errors
// alike. Every method needs a case here: a new method without one fails.
func TestRESTEqualsJSONRPC(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	routes := restRoutes(t)

	// Two sessions with the same history, one per transport, for the calls
	// that change a session; shared is used by reads over both.
	newSession := func() string {
		id := createSession(t, c, map[string]any{"mode": "auto"})
		promptComplete(t, c, id, "hello")
		return id
	}
	shared := newSession()
	own := map[string]string{"rest": newSession(), "ws": newSession()}
	closing := map[string]string{"rest": newSession(), "ws": newSession()}
	unused := map[string]string{"rest": newSession(), "ws": newSession()} // no case prompts them again
	onOwn := func(extra map[string]any) func(string) map[string]any {
		return func(tr string) map[string]any {
			p := map[string]any{"sessionId": own[tr]}
			for k, v := range extra {
				p[k] = v
			}
			return p
		}
	}
	suffixed := func(key, prefix string, extra map[string]any) func(string) map[string]any {
		return func(tr string) map[string]any {
			p := map[string]any{key: prefix + "-" + tr}
			for k, v := range extra {
				p[k] = v
			}
			return p
		}
	}
	sid := []string{"sessionId"}

	cases := map[string][]parityCase{
		"agent.bindChannel": {{name: "unknown agent", params: same(map[string]any{"name": "no-such-agent", "channel": "telegram"}), wantError: "*"}},
		"agent.create": {{name: "ok", params: suffixed("name", "parity", map[string]any{"description": "an agent of the parity test"}),
			mask: []string{"name", "path"}}},
		"agent.delete":  {{name: "unknown", params: same(map[string]any{"name": "no-such-agent"}), wantError: "not_found"}},
		"agent.list":    {{name: "ok", params: same(map[string]any{})}},
		"agent.spawn":   {{name: "unknown agent", params: same(map[string]any{"name": "no-such-agent", "task": "x"}), wantError: "*"}},
		"approval.list": {{name: "ok", params: same(map[string]any{"sessionId": shared})}},
		"approval.respond": {{name: "unknown request", params: same(map[string]any{"requestId": "no-such-request", "decision": "allow"}), wantError: "not_found"},
			{name: "bad decision", params: same(map[string]any{"requestId": "r", "decision": "maybe"}), wantError: "invalid_params"}},
		"question.list": {{name: "ok", params: same(map[string]any{"sessionId": shared})}},
		"question.respond": {{name: "unknown question", params: same(map[string]any{"questionId": "q-no-such-question", "declined": true}), wantError: "not_found"},
			{name: "wrong type", params: same(map[string]any{"questionId": "q", "answers": "Blue"}), wantError: "invalid_params"}},
		"backend.set": {{name: "local", params: same(map[string]any{"sessionId": shared, "kind": "local"})}},
		"checkpoint.list": {{name: "none", params: same(map[string]any{"sessionId": shared})},
			{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session"}), wantError: "not_found"}},
		"checkpoint.diff":    {{name: "unknown checkpoint", params: same(map[string]any{"sessionId": shared, "from": "c-none"}), wantError: "not_found"}},
		"checkpoint.restore": {{name: "unknown checkpoint", params: same(map[string]any{"sessionId": shared, "checkpointId": "c-none"}), wantError: "not_found"}},
		"checkpoint.delete":  {{name: "unknown checkpoint", params: same(map[string]any{"sessionId": shared, "checkpointId": "c-none"}), wantError: "not_found"}},
		"command.list":       {{name: "ok", params: same(map[string]any{"sessionId": shared})}},
		"command.run":        {{name: "unknown command", params: onOwn(map[string]any{"name": "no-such-command"}), wantError: "*"}},
		"gateway.bind":       {{name: "bad platform", params: same(map[string]any{"platform": "carrier-pigeon", "credentialsRef": "env:X", "target": map[string]any{}}), wantError: "invalid_params"}},
		"gateway.list":       {{name: "ok", params: same(map[string]any{})}},
		"gateway.unbind":     {{name: "unknown", params: same(map[string]any{"bindingId": "no-such-binding"}), wantError: "not_found"}},
		"job.cancel":         {{name: "unknown", params: same(map[string]any{"jobId": "no-such-job"}), wantError: "not_found"}},
		"job.list":           {{name: "ok", params: same(map[string]any{})}},
		"job.runNow":         {{name: "unknown", params: same(map[string]any{"jobId": "no-such-job"}), wantError: "not_found"}},
		"job.schedule": {{name: "ok", params: suffixed("task", "parity", map[string]any{"spec": "@every 1h", "workdir": t.TempDir()}),
			mask: []string{"jobId", "nextRunAt"}}},
		"mcp.list":      {{name: "ok", params: same(map[string]any{})}},
		"mcp.add":       {{name: "no command", params: same(map[string]any{"name": "parity"}), wantError: "invalid_params"}},
		"mcp.remove":    {{name: "unknown", params: same(map[string]any{"name": "no-such-server"}), wantError: "not_found"}},
		"mcp.update":    {{name: "unknown", params: same(map[string]any{"name": "no-such-server", "patch": map[string]any{"disabled": true}}), wantError: "not_found"}},
		"mcp.test":      {{name: "unknown", params: same(map[string]any{"name": "no-such-server"}), wantError: "not_found"}},
		"mcp.reload":    {{name: "unknown", params: same(map[string]any{"name": "no-such-server"}), wantError: "not_found"}},
		"memory.search": {{name: "ok", params: same(map[string]any{"query": "parity", "limit": 5})}},
		"memory.list": {{name: "empty namespace", params: same(map[string]any{"namespace": "parity-none"})},
			{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session"}), wantError: "not_found"}},
		"memory.delete": {{name: "unknown", params: same(map[string]any{"id": "m-none"}), wantError: "not_found"}},
		"memory.write":  {{name: "ok", params: suffixed("text", "parity note", nil), mask: []string{"id"}}},
		"permission.allowlist.add": {{name: "ok", params: func(tr string) map[string]any {
			return map[string]any{"pattern": "shell(echo " + tr + ")", "scope": "always"}
		},
			mask: []string{"patternId", "id", "pattern", "createdAt"}}},
		"permission.allowlist.list":   {{name: "ok", params: same(map[string]any{"scope": "always"})}},
		"permission.allowlist.remove": {{name: "unknown", params: same(map[string]any{"patternId": "no-such-pattern"}), wantError: "not_found"}},
		"provider.configure": {{name: "wrong type", params: same(map[string]any{"vendor": "openai", "config": map[string]any{"api_key": 5}}), wantError: "invalid_params"},
			{name: "bad vendor", params: same(map[string]any{"vendor": "nobody", "config": map[string]any{}}), wantError: "not_found"}},
		"provider.list": {{name: "ok", params: same(map[string]any{})}},
		"provider.models": {{name: "fake", params: same(map[string]any{"vendor": "fake"})},
			{name: "unknown vendor", params: same(map[string]any{"vendor": "nobody"}), wantError: "not_found"}},
		"provider.remove": {{name: "unknown vendor", params: same(map[string]any{"vendor": "nobody"}), wantError: "not_found"}},
		"provider.test":   {{name: "unknown vendor", params: same(map[string]any{"provider": "nobody"}), wantError: "not_found"}},
		"principal.create": {{name: "ok", params: suffixed("name", "parity", map[string]any{"role": "viewer"}), mask: []string{"principalId", "name", "createdAt"}},
			{name: "unknown role", params: same(map[string]any{"name": "parity-bad", "role": "superuser"}), wantError: "invalid_params"}},
		"principal.list":   {{name: "ok", params: same(map[string]any{})}},
		"principal.update": {{name: "unknown", params: same(map[string]any{"principalId": "p-none", "role": "viewer"}), wantError: "not_found"}},
		"principal.setBudget": {{name: "unknown", params: same(map[string]any{"principalId": "p-none", "maxTokens": 5}), wantError: "not_found"},
			{name: "negative", params: same(map[string]any{"principalId": "p-none", "maxTokens": -1}), wantError: "invalid_params"},
			{name: "builtin", params: same(map[string]any{"principalId": "builtin-admin", "maxTokens": 5}), wantError: "invalid_params"}},
		"principal.delete": {{name: "builtin", params: same(map[string]any{"principalId": "builtin-admin"}), wantError: "invalid_params"}},
		"key.create":       {{name: "unknown principal", params: same(map[string]any{"principalId": "p-none"}), wantError: "not_found"}},
		"key.list":         {{name: "ok", params: same(map[string]any{"principalId": "builtin-admin"})}},
		"key.revoke":       {{name: "unknown", params: same(map[string]any{"keyId": "k-none"}), wantError: "not_found"}},
		"audit.list": {{name: "key.create", params: same(map[string]any{"method": "key.create", "limit": 5})},
			{name: "bad limit", params: same(map[string]any{"limit": 0}), wantError: "invalid_params"}},
		"session.share": {{name: "unknown principal", params: same(map[string]any{"sessionId": shared, "principalId": "p-none", "role": "viewer"}), wantError: "not_found"},
			{name: "bad role", params: same(map[string]any{"sessionId": shared, "principalId": "p-none", "role": "owner"}), wantError: "invalid_params"}},
		"session.unshare":   {{name: "no grant", params: same(map[string]any{"sessionId": shared, "principalId": "p-none"}), wantError: "not_found"}},
		"provider.loginWeb": {{name: "unsupported", params: same(map[string]any{"vendor": "openai", "method": "device"}), wantError: "*"}},
		"session.close":     {{name: "ok", params: func(tr string) map[string]any { return map[string]any{"sessionId": closing[tr]} }}},
		"session.compact": {{name: "ok", params: onOwn(nil)},
			{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session"}), wantError: "not_found"}},
		"session.create": {{name: "ok", params: same(map[string]any{"workdir": t.TempDir(), "mode": "plan"}), mask: sid},
			{name: "missing workdir", params: same(map[string]any{"workdir": "/does/not/exist"}), wantError: "invalid_params"}},
		"session.deleteSaved": {{name: "unknown", params: same(map[string]any{"sessionId": "no-such-session"}), wantError: "*"}},
		"session.prune": {{name: "dry run", params: same(map[string]any{"olderThan": "720h", "dryRun": true})},
			{name: "no rule", params: same(map[string]any{"dryRun": true}), wantError: "invalid_params"}},
		"session.interrupt": {{name: "idle", params: onOwn(nil)}},
		"session.list": {{name: "closed too", params: same(map[string]any{"includeClosed": true})},
			{name: "a query value of the wrong type", params: same(map[string]any{"includeClosed": "maybe"}), wantError: "invalid_params"}},
		"session.prompt": {{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session", "text": "hello"}), wantError: "not_found"},
			{name: "text is a number", params: same(map[string]any{"sessionId": shared, "text": 5}), wantError: "invalid_params"}},
		"session.resume": {{name: "all", params: same(map[string]any{"sessionId": shared})},
			{name: "after 2", params: same(map[string]any{"sessionId": shared, "afterSeq": 2})},
			{name: "negative", params: same(map[string]any{"sessionId": shared, "afterSeq": -1}), wantError: "invalid_params"},
			{name: "seq is a string", params: same(map[string]any{"sessionId": shared, "afterSeq": "x"}), wantError: "invalid_params"}},
		"session.steer": {{name: "idle starts a turn", params: onOwn(map[string]any{"text": "hello"}), mask: []string{"turnId"}},
			{name: "empty text", params: onOwn(map[string]any{"text": " "}), wantError: "invalid_params"}},
		"session.queue.list": {{name: "empty", params: same(map[string]any{"sessionId": shared})},
			{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session"}), wantError: "not_found"}},
		"session.queue.remove": {{name: "not queued", params: same(map[string]any{"sessionId": shared, "turnId": "t-none"}), wantError: "not_found"}},
		"session.queue.clear":  {{name: "empty", params: onOwn(nil)}},
		"session.setMode": {{name: "ok", params: same(map[string]any{"sessionId": shared, "mode": "auto"})},
			{name: "bad mode", params: same(map[string]any{"sessionId": shared, "mode": "yolo"}), wantError: "invalid_params"}},
		"session.setModel": {{name: "ok", params: same(map[string]any{"sessionId": shared, "model": "fake"})},
			{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session", "model": "m"}), wantError: "not_found"}},
		"session.setEffort": {{name: "ok", params: same(map[string]any{"sessionId": shared, "effort": "low"})},
			{name: "bad effort", params: same(map[string]any{"sessionId": shared, "effort": "extreme"}), wantError: "invalid_params"}},
		"session.rename": {{name: "ok", params: same(map[string]any{"sessionId": shared, "title": "parity"})}},
		"session.archive": {{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session"}), wantError: "not_found"},
			{name: "no session", params: same(map[string]any{}), wantError: "*"}},
		"session.unarchive": {{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session"}), wantError: "not_found"}},
		"session.fork": {{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session", "atSeq": 0}), wantError: "not_found"},
			{name: "seq past the log", params: same(map[string]any{"sessionId": shared, "atSeq": 1_000_000}), wantError: "invalid_params"}},
		"session.rewind": {{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session", "atSeq": 0}), wantError: "not_found"},
			{name: "negative seq", params: same(map[string]any{"sessionId": shared, "atSeq": -1}), wantError: "invalid_params"}},
		"session.notice": {{name: "ok", params: onOwn(map[string]any{"text": "parity"})},
			{name: "empty text", params: onOwn(map[string]any{"text": ""}), wantError: "invalid_params"}},
		"session.setBrowserProvider": {{name: "ok", params: same(map[string]any{"sessionId": shared, "provider": "none"})},
			{name: "host", params: same(map[string]any{"sessionId": shared, "provider": "host"})},
			{name: "bad provider", params: same(map[string]any{"sessionId": shared, "provider": "docker"}), wantError: "invalid_params"}},
		"session.artifacts": {{name: "none", params: same(map[string]any{"sessionId": shared})},
			{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session"}), wantError: "not_found"}},
		// A session of each transport that no other case prompts.
		"session.usage": {{name: "ok", params: func(tr string) map[string]any { return map[string]any{"sessionId": unused[tr]} }, mask: []string{"sessionId", "key"}},
			{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session"}), wantError: "not_found"}},
		// On the unprompted sessions: a budget never reached.
		"session.setBudget": {{name: "ok", params: func(tr string) map[string]any {
			return map[string]any{"sessionId": unused[tr], "maxCostMicroUsd": 5_000_000, "maxTokens": 1_000_000}
		}},
			{name: "negative", params: same(map[string]any{"sessionId": shared, "maxTokens": -1}), wantError: "invalid_params"},
			{name: "not a number", params: same(map[string]any{"sessionId": shared, "maxCostMicroUsd": "lots"}), wantError: "invalid_params"},
			{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session"}), wantError: "not_found"}},
		"session.toolContent": {{name: "unknown call", params: same(map[string]any{"sessionId": shared, "callId": "call_none"}), wantError: "not_found"}},
		"file.complete": {{name: "ok", params: same(map[string]any{"sessionId": shared, "limit": 5})},
			{name: "outside", params: same(map[string]any{"sessionId": shared, "query": "../x"}), wantError: "invalid_params"}},
		"skill.install": {{name: "missing source", params: same(map[string]any{"source": "/does/not/exist"}), wantError: "*"}},
		"skill.list":    {{name: "ok", params: same(map[string]any{})}},
		"skill.reload":  {{name: "ok", params: same(map[string]any{})}},
		"skill.remove":  {{name: "unknown", params: same(map[string]any{"name": "no-such-skill"}), wantError: "*"}},
		"skill.search":  {{name: "ok", params: same(map[string]any{"query": "parity"})}},
		"skill.read":    {{name: "unknown", params: same(map[string]any{"name": "no-such-skill"}), wantError: "not_found"}},
		"skill.write":   {{name: "unknown", params: same(map[string]any{"name": "no-such-skill", "content": "x"}), wantError: "not_found"}},
		"skill.create":  {{name: "no front matter", params: same(map[string]any{"name": "parity", "content": "x"}), wantError: "invalid_params"}},
		"system.health": {{name: "ok", params: same(map[string]any{})}},
		"settings.get":  {{name: "project", params: same(map[string]any{"scope": "project"}), wantError: "unsupported"}},
		"settings.set": {{name: "a credential", params: same(map[string]any{"patch": map[string]any{"x": map[string]any{"password": "p"}}}), wantError: "invalid_params"},
			{name: "unknown vendor", params: same(map[string]any{"patch": map[string]any{"providers": map[string]any{"nobody": map[string]any{"model": "m"}}}}), wantError: "not_found"}},
		"system.reloadSettings": {{name: "ok", params: same(map[string]any{})}},
		// hello is the WebSocket handshake: each case has a connection of
		// its own.
		"system.hello": {{name: "ok", fresh: true, params: same(map[string]any{"token": d.Token(), "clientVersion": "t", "protocolVersion": "1.0.0"}), mask: []string{"connectionId"}},
			{name: "bad version", fresh: true, params: same(map[string]any{"token": d.Token(), "clientVersion": "t", "protocolVersion": "banana"}), wantError: "invalid_params"},
			{name: "bad token", fresh: true, params: same(map[string]any{"token": "wrong", "clientVersion": "t", "protocolVersion": "1.0.0"}), wantError: "unauthorized"}},
		"system.info": {{name: "ok", params: same(map[string]any{}), mask: []string{"counters"}}},
		// A successful shutdown would end the test's daemon.
		"system.shutdown": {},
		"team.start":      {{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session", "n": 2, "task": "x"}), wantError: "*"}},
		"team.status": {{name: "unknown team", params: same(map[string]any{"teamId": "no-such-team"}), wantError: "*"},
			{name: "none started", params: same(map[string]any{}), wantError: "not_found"}},
		"tool.list": {{name: "ok", params: same(map[string]any{"sessionId": shared})}},
		// Lending succeeds only over WebSocket (TestLentToolInvalid checks
		// REST's unsupported); what is refused first is refused alike.
		"tool.register": {{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session", "tools": []any{map[string]any{"name": "x", "permission": "read"}}}), wantError: "not_found"},
			{name: "no tools", params: same(map[string]any{"sessionId": shared, "tools": []any{}}), wantError: "invalid_params"},
			{name: "built-in name", params: same(map[string]any{"sessionId": shared, "tools": []any{map[string]any{"name": "shell", "permission": "exec"}}}), wantError: "invalid_params"}},
		"tool.unregister": {{name: "nothing lent", params: same(map[string]any{"sessionId": shared, "names": []any{"x"}})},
			{name: "unknown session", params: same(map[string]any{"sessionId": "no-such-session"}), wantError: "not_found"}},
		// A window before any event: turns of other cases cannot change it between the two calls.
		"usage.summary": {{name: "ok", params: same(map[string]any{"groupBy": "day", "until": "2000-01-01T00:00:00Z"})},
			{name: "bad since", params: same(map[string]any{"since": "yesterday"}), wantError: "invalid_params"},
			{name: "bad groupBy", params: same(map[string]any{"groupBy": "week"}), wantError: "invalid_params"}},
	}

	names := methods.Names()
	sort.Strings(names)
	for _, name := range names {
		route, ok := routes[name]
		if !ok {
			continue // TestEveryMethodHasARESTRoute says why
		}
		list, ok := cases[name]
		if !ok {
			t.Errorf("%s has no case in TestRESTEqualsJSONRPC: add one", name)
			continue
		}
		// Every method refuses an unknown parameter alike.
		list = append(list, parityCase{name: "unknown field", params: same(map[string]any{"bogus": 1}), wantError: "invalid_params"})
		for _, pc := range list {
			t.Run(name+"/"+pc.name, func(t *testing.T) {
				status, restBody := restCall(t, d, route, pc.params("rest"))
				wc := c
				if pc.fresh {
					wc = dialWS(t, d)
				}
				result, errObj := wsRaw(t, wc, name, pc.params("ws"))
				switch {
				case pc.wantError == "" && errObj != nil:
					t.Fatalf("JSON-RPC failed: %s", errObj)
				case pc.wantError == "" && status != http.StatusOK:
					t.Fatalf("REST answered %d: %s", status, restBody)
				case pc.wantError != "" && errObj == nil:
					t.Fatalf("JSON-RPC succeeded, want %s: %s", pc.wantError, result)
				case pc.wantError != "" && (status < 400 || status > 599):
					t.Fatalf("REST answered %d, want an error: %s", status, restBody)
				}
				want := result
				if errObj != nil {
					want = errObj
					var e struct {
						Data struct {
							Code string `json:"code"`
						} `json:"data"`
					}
					_ = json.Unmarshal(errObj, &e)
					if e.Data.Code == "not_implemented" || e.Data.Code == "method_not_found" {
						// The protocol reserves both: a documented method never answers them.
						t.Fatalf("documented method %s answered %s: %s", name, e.Data.Code, errObj)
					}
					if pc.wantError != "*" && e.Data.Code != pc.wantError {
						t.Errorf("error code %q, want %q: %s", e.Data.Code, pc.wantError, errObj)
					}
				}
				if got, w := canonical(t, restBody, pc.mask), canonical(t, want, pc.mask); got != w {
					t.Errorf("REST and JSON-RPC differ\nREST (%d):\n%s\nJSON-RPC:\n%s", status, got, w)
				}
				if strings.Contains(string(restBody), "proto:") {
					t.Errorf("REST body leaks a protobuf message: %s", restBody)
				}
			})
		}
	}
}

// TestRESTResumeShowsNumericSeqAndPayload is the curl of the issue:
// GET-free, POST /v1/session/resume answers events whose seq is a JSON
// number and whose payload is an object, as over JSON-RPC.
func TestRESTResumeShowsNumericSeqAndPayload(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	id := createSession(t, c, nil)
	promptComplete(t, c, id, "hello")
	status, body := restCall(t, d, restRoute{Verb: "POST", Path: "/v1/session/resume"}, map[string]any{"sessionId": id})
	if status != http.StatusOK {
		t.Fatalf("resume: %d %s", status, body)
	}
	var res struct {
		Events []map[string]json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(body, &res); err != nil || len(res.Events) == 0 {
		t.Fatalf("resume: %v %s", err, body)
	}
	for _, ev := range res.Events {
		if s := ev["seq"]; len(s) == 0 || s[0] < '0' || s[0] > '9' {
			t.Fatalf("seq is not a number: %s", s)
		}
		if p := ev["payload"]; len(p) == 0 || p[0] != '{' {
			t.Fatalf("payload is not an object: %s", ev)
		}
		if _, ok := ev["turnStarted"]; ok {
			t.Fatalf("an event carries its oneof member name: %s", body)
		}
	}
}
