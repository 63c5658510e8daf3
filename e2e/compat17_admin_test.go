package e2e

// The contract suite of the snowpea 1.7 methods Trellis added for issue 32
// item 9 (memory, skills, providers, MCP servers, settings): each method
// is called the way a 1.7 client calls it, over WebSocket after a 1.7.0
// hello, four ways: valid params, a field of the wrong type, an id that
// names nothing, and a field the method does not know. The params and
// result fields are those of snowpea 1.7.0's protocol reference.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/runtime/tool/mcp/mcptest"
)

// contract17 is one method's four calls. Each params function may read
// what earlier methods' valid calls left in env; unknownID is nil for a
// method whose params name nothing that could be missing.
type contract17 struct {
	method       string
	valid        func(t *testing.T, e *env17) map[string]any
	check        func(t *testing.T, e *env17, result json.RawMessage)
	wrongType    func(e *env17) map[string]any
	unknownID    func(e *env17) map[string]any
	unknownInMsg string // what the not_found message names
	unknownField func(e *env17) map[string]any
}

// env17 is the state the calls share.
type env17 struct {
	c         *wsClient
	sessionID string
	workdir   string
	vals      map[string]string
}

func decode17[T any](t *testing.T, raw json.RawMessage) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	return v
}

func runContracts17(t *testing.T, e *env17, cases []contract17) {
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.method, func(t *testing.T) {
			var raw json.RawMessage
			if err := e.c.Call(ctx, tc.method, tc.valid(t, e), &raw); err != nil {
				t.Fatalf("valid call: %v", err)
			}
			if tc.check != nil {
				tc.check(t, e, raw)
			}
			err := e.c.Call(ctx, tc.method, tc.wrongType(e), nil)
			wantCode(t, err, "invalid_params", "")
			if tc.unknownID != nil {
				err := e.c.Call(ctx, tc.method, tc.unknownID(e), nil)
				wantCode(t, err, "not_found", tc.unknownInMsg)
			}
			err = e.c.Call(ctx, tc.method, tc.unknownField(e), nil)
			wantCode(t, err, "invalid_params", "bogusField")
		})
	}
}

func memoryContracts17() []contract17 {
	return []contract17{{
		method: "memory.list",
		valid: func(t *testing.T, e *env17) map[string]any {
			for _, text := range []string{"the deploy key is in the vault", "lunch is at noon"} {
				var res struct{ ID string }
				if err := e.c.Call(context.Background(), "memory.write", map[string]any{"text": text, "tags": []string{"t"}}, &res); err != nil {
					t.Fatalf("memory.write: %v", err)
				}
				e.vals[text] = res.ID
			}
			return map[string]any{"sessionId": e.sessionID, "scope": "all", "limit": 10}
		},
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			res := decode17[struct {
				Entries []struct {
					ID, Text, CreatedAt, Scope string
					Tags                       []string
				}
			}](t, raw)
			if len(res.Entries) != 2 || res.Entries[0].Text != "lunch is at noon" || res.Entries[1].ID != e.vals["the deploy key is in the vault"] ||
				res.Entries[0].Scope != "global" || res.Entries[0].CreatedAt == "" || len(res.Entries[0].Tags) != 1 {
				t.Fatalf("entries = %s, want both notes newest first", raw)
			}
			var q struct{ Entries []struct{ Text string } }
			if err := e.c.Call(context.Background(), "memory.list", map[string]any{"query": "vault"}, &q); err != nil || len(q.Entries) != 1 {
				t.Fatalf("query vault: %v %v", q, err)
			}
		},
		wrongType:    func(e *env17) map[string]any { return map[string]any{"limit": "ten"} },
		unknownID:    func(e *env17) map[string]any { return map[string]any{"sessionId": "s-nosuch"} },
		unknownInMsg: "s-nosuch",
		unknownField: func(e *env17) map[string]any { return map[string]any{"bogusField": 1} },
	}, {
		method: "memory.delete",
		valid:  func(t *testing.T, e *env17) map[string]any { return map[string]any{"id": e.vals["lunch is at noon"]} },
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			if !decode17[struct{ Ok bool }](t, raw).Ok {
				t.Fatalf("result %s, want ok", raw)
			}
			var res struct{ Entries []struct{ ID string } }
			if err := e.c.Call(context.Background(), "memory.list", map[string]any{}, &res); err != nil || len(res.Entries) != 1 {
				t.Fatalf("after delete: %v %v, want one note left", res, err)
			}
		},
		wrongType:    func(e *env17) map[string]any { return map[string]any{"id": 42} },
		unknownID:    func(e *env17) map[string]any { return map[string]any{"id": "m-nosuch"} },
		unknownInMsg: "m-nosuch",
		unknownField: func(e *env17) map[string]any { return map[string]any{"id": "m-x", "bogusField": true} },
	}}
}

func skillMD(name, body string) string {
	return "---\nname: " + name + "\ndescription: Keeps release notes tidy.\n---\n" + body + "\n"
}

func skillContracts17() []contract17 {
	missingDir := func(e *env17) string { return filepath.Join(e.workdir, "no-such-dir") }
	return []contract17{{
		method: "skill.create",
		valid: func(t *testing.T, e *env17) map[string]any {
			return map[string]any{"name": "notes-helper", "workdir": e.workdir, "scope": "global", "content": skillMD("notes-helper", "Sort the notes by date.")}
		},
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			res := decode17[struct{ Name, Path string }](t, raw)
			if res.Name != "notes-helper" || filepath.Base(res.Path) != "SKILL.md" {
				t.Fatalf("result %s", raw)
			}
			var list struct{ Skills []struct{ Name string } }
			if err := e.c.Call(context.Background(), "skill.list", map[string]any{}, &list); err != nil || len(list.Skills) != 1 || list.Skills[0].Name != "notes-helper" {
				t.Fatalf("skill.list after create: %v %v", list, err)
			}
			// Again without force: the name is taken.
			err := e.c.Call(context.Background(), "skill.create", map[string]any{"name": "notes-helper", "workdir": e.workdir, "content": skillMD("notes-helper", "x")}, nil)
			wantCode(t, err, "invalid_params", "force")
		},
		wrongType: func(e *env17) map[string]any {
			return map[string]any{"name": "x", "workdir": e.workdir, "content": skillMD("x", "y"), "force": "yes"}
		},
		unknownID: func(e *env17) map[string]any {
			return map[string]any{"name": "other", "workdir": missingDir(e), "content": skillMD("other", "y")}
		},
		unknownInMsg: "no-such-dir",
		unknownField: func(e *env17) map[string]any {
			return map[string]any{"name": "x", "workdir": e.workdir, "content": skillMD("x", "y"), "bogusField": 1}
		},
	}, {
		method: "skill.read",
		valid: func(t *testing.T, e *env17) map[string]any {
			return map[string]any{"name": "notes-helper", "workdir": e.workdir}
		},
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			res := decode17[struct{ Content, Path, Scope string }](t, raw)
			if res.Content != skillMD("notes-helper", "Sort the notes by date.") || res.Scope != "global" || filepath.Base(res.Path) != "SKILL.md" {
				t.Fatalf("result %s", raw)
			}
		},
		wrongType: func(e *env17) map[string]any {
			return map[string]any{"name": []string{"notes-helper"}, "workdir": e.workdir}
		},
		unknownID:    func(e *env17) map[string]any { return map[string]any{"name": "ghost-skill", "workdir": e.workdir} },
		unknownInMsg: "ghost-skill",
		unknownField: func(e *env17) map[string]any {
			return map[string]any{"name": "notes-helper", "workdir": e.workdir, "bogusField": "x"}
		},
	}, {
		method: "skill.write",
		valid: func(t *testing.T, e *env17) map[string]any {
			return map[string]any{"name": "notes-helper", "workdir": e.workdir, "content": skillMD("notes-helper", "Sort the notes by version.")}
		},
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			var res struct{ Content string }
			if err := e.c.Call(context.Background(), "skill.read", map[string]any{"name": "notes-helper", "workdir": e.workdir}, &res); err != nil ||
				res.Content != skillMD("notes-helper", "Sort the notes by version.") {
				t.Fatalf("skill.read after write: %q %v", res.Content, err)
			}
		},
		wrongType: func(e *env17) map[string]any {
			return map[string]any{"name": "notes-helper", "workdir": e.workdir, "content": 7}
		},
		unknownID: func(e *env17) map[string]any {
			return map[string]any{"name": "ghost-skill", "workdir": e.workdir, "content": skillMD("ghost-skill", "y")}
		},
		unknownInMsg: "ghost-skill",
		unknownField: func(e *env17) map[string]any {
			return map[string]any{"name": "notes-helper", "workdir": e.workdir, "content": skillMD("notes-helper", "y"), "bogusField": nil}
		},
	}}
}

// secretKey17 is the API key the provider cases configure: no result may
// show it.
const secretKey17 = "sk-compat17-SECRET-do-not-show"

// modelServer17 is an OpenAI-compatible endpoint that lists two models and
// refuses completions.
func modelServer17(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+secretKey17 {
			http.Error(w, `{"error":{"message":"bad key"}}`, http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/v1/models":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"model-a","object":"model"},{"id":"model-b","object":"model"}]}`))
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"message":"the test server makes no completions","type":"invalid_request_error"}}`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func noSecret(t *testing.T, raw json.RawMessage) {
	t.Helper()
	if strings.Contains(string(raw), secretKey17) {
		t.Fatalf("a result shows the API key: %s", raw)
	}
}

func providerContracts17(srv func() *httptest.Server) []contract17 {
	vendorParams := func(key string) func(e *env17) map[string]any {
		return func(e *env17) map[string]any { return map[string]any{key: "gemini"} }
	}
	return []contract17{{
		method: "provider.models",
		valid: func(t *testing.T, e *env17) map[string]any {
			if err := e.c.Call(context.Background(), "provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{
				"api_key": secretKey17, "base_url": srv().URL + "/v1", "model": "model-a"}}, nil); err != nil {
				t.Fatalf("provider.configure: %v", err)
			}
			return map[string]any{"vendor": "openai"}
		},
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			noSecret(t, raw)
			res := decode17[struct {
				Vendor, Current, Source, Detail string
				Models                          []string
			}](t, raw)
			if res.Vendor != "openai" || res.Source != "live" || res.Current != "model-a" || strings.Join(res.Models, ",") != "model-a,model-b" {
				t.Fatalf("result %s, want the live listing", raw)
			}
			var def struct{ Vendor, Source string }
			if err := e.c.Call(context.Background(), "provider.models", map[string]any{}, &def); err != nil || def.Vendor != "fake" {
				t.Fatalf("the default vendor's models: %+v %v", def, err)
			}
		},
		wrongType:    func(e *env17) map[string]any { return map[string]any{"vendor": 5} },
		unknownID:    vendorParams("vendor"),
		unknownInMsg: "gemini",
		unknownField: func(e *env17) map[string]any { return map[string]any{"vendor": "openai", "bogusField": 1} },
	}, {
		method: "provider.test",
		valid:  func(t *testing.T, e *env17) map[string]any { return map[string]any{"provider": "fake"} },
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			res := decode17[struct {
				OK              bool `json:"ok"`
				Provider, Reply string
				LatencyMs       *int64
			}](t, raw)
			if !res.OK || res.Provider != "fake" || res.Reply != "Default from the fixture." || res.LatencyMs == nil {
				t.Fatalf("result %s, want the fixture's answer", raw)
			}
			// A vendor whose endpoint refuses is ok false with the reason.
			var failed json.RawMessage
			if err := e.c.Call(context.Background(), "provider.test", map[string]any{"provider": "openai", "model": "model-b"}, &failed); err != nil {
				t.Fatalf("provider.test openai: %v", err)
			}
			noSecret(t, failed)
			f := decode17[struct {
				OK           bool `json:"ok"`
				Model, Error string
			}](t, failed)
			if f.OK || f.Model != "model-b" || f.Error == "" {
				t.Fatalf("result %s, want a failed test naming why", failed)
			}
		},
		wrongType:    func(e *env17) map[string]any { return map[string]any{"provider": "fake", "model": false} },
		unknownID:    vendorParams("provider"),
		unknownInMsg: "gemini",
		unknownField: func(e *env17) map[string]any { return map[string]any{"provider": "fake", "bogusField": 1} },
	}, {
		method: "provider.remove",
		valid:  func(t *testing.T, e *env17) map[string]any { return map[string]any{"vendor": "openai"} },
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			var list struct {
				Providers []struct {
					Vendor     string
					Configured bool
				}
			}
			if err := e.c.Call(context.Background(), "provider.list", map[string]any{}, &list); err != nil {
				t.Fatal(err)
			}
			for _, p := range list.Providers {
				if p.Vendor == "openai" && p.Configured {
					t.Fatalf("openai still configured after provider.remove")
				}
			}
			var res struct{ Source string }
			if err := e.c.Call(context.Background(), "provider.models", map[string]any{"vendor": "openai"}, &res); err != nil || res.Source == "live" {
				t.Fatalf("provider.models after remove: %+v %v, want no live listing", res, err)
			}
		},
		wrongType:    func(e *env17) map[string]any { return map[string]any{"vendor": []int{1}} },
		unknownID:    vendorParams("vendor"),
		unknownInMsg: "gemini",
		unknownField: func(e *env17) map[string]any { return map[string]any{"vendor": "openai", "bogusField": 1} },
	}}
}

func mcpContracts17(markers string) []contract17 {
	cmd, env := mcptest.Command(markers)
	server := func(extra map[string]any) map[string]any {
		p := map[string]any{"name": "gosrv", "command": cmd, "env": env}
		for k, v := range extra {
			p[k] = v
		}
		return p
	}
	listed := func(t *testing.T, e *env17) map[string]string {
		t.Helper()
		var res struct {
			Servers []struct{ Name, State string }
		}
		if err := e.c.Call(context.Background(), "mcp.list", map[string]any{}, &res); err != nil {
			t.Fatalf("mcp.list: %v", err)
		}
		out := map[string]string{}
		for _, s := range res.Servers {
			out[s.Name] = s.State
		}
		return out
	}
	type probe struct {
		OK        bool `json:"ok"`
		State     string
		Error     *string
		ElapsedMs *int64
		Tools     []struct{ Name, Description string }
	}
	ghost := func(extra map[string]any) func(e *env17) map[string]any {
		return func(e *env17) map[string]any {
			p := map[string]any{"name": "ghost"}
			for k, v := range extra {
				p[k] = v
			}
			return p
		}
	}
	return []contract17{{
		method: "mcp.add",
		valid: func(t *testing.T, e *env17) map[string]any {
			return server(map[string]any{"scope": "global", "test": true, "workdir": e.workdir})
		},
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			res := decode17[struct {
				probe
				Path string
			}](t, raw)
			if !res.OK || res.State != "ready" || len(res.Tools) == 0 || filepath.Base(res.Path) != "mcp.json" {
				t.Fatalf("result %s, want the server written and ready with its tools", raw)
			}
			if got := listed(t, e); got["gosrv"] != "ready" {
				t.Fatalf("mcp.list after add: %v", got)
			}
			err := e.c.Call(context.Background(), "mcp.add", server(nil), nil)
			wantCode(t, err, "invalid_params", "force")
			// A server that cannot start, probed first, is not written.
			var failed probe
			if err := e.c.Call(context.Background(), "mcp.add", map[string]any{"name": "broken", "command": "/nonexistent/mcp-server", "test": true}, &failed); err != nil {
				t.Fatalf("mcp.add broken: %v", err)
			}
			if failed.OK || failed.State != "error" || failed.Error == nil {
				t.Fatalf("broken server: %+v, want not written with the reason", failed)
			}
			if _, ok := listed(t, e)["broken"]; ok {
				t.Fatalf("a server whose probe failed was written")
			}
		},
		wrongType: func(e *env17) map[string]any { return server(map[string]any{"name": "other", "args": "--flag"}) },
		unknownID: func(e *env17) map[string]any {
			return server(map[string]any{"name": "other", "workdir": filepath.Join(e.workdir, "no-such-dir")})
		},
		unknownInMsg: "no-such-dir",
		unknownField: func(e *env17) map[string]any { return server(map[string]any{"name": "other", "bogusField": 1}) },
	}, {
		method: "mcp.test",
		valid:  func(t *testing.T, e *env17) map[string]any { return map[string]any{"name": "gosrv"} },
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			res := decode17[probe](t, raw)
			if !res.OK || res.State != "ready" || len(res.Tools) == 0 || res.ElapsedMs == nil || res.Error != nil {
				t.Fatalf("result %s, want ready with tools", raw)
			}
			var draft probe
			if err := e.c.Call(context.Background(), "mcp.test", map[string]any{"command": "/nonexistent/mcp-server"}, &draft); err != nil {
				t.Fatalf("mcp.test draft: %v", err)
			}
			if draft.OK || draft.State != "error" || draft.Error == nil || !strings.Contains(*draft.Error, "nonexistent") {
				t.Fatalf("draft that cannot start: %+v", draft)
			}
		},
		wrongType:    func(e *env17) map[string]any { return map[string]any{"name": "gosrv", "timeoutSec": "soon"} },
		unknownID:    ghost(nil),
		unknownInMsg: "ghost",
		unknownField: func(e *env17) map[string]any { return map[string]any{"name": "gosrv", "bogusField": 1} },
	}, {
		method: "mcp.update",
		valid: func(t *testing.T, e *env17) map[string]any {
			return map[string]any{"name": "gosrv", "scope": "global", "patch": map[string]any{"disabled": true}}
		},
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			var res struct {
				Servers []struct{ Name, State, Reason string }
			}
			if err := e.c.Call(context.Background(), "mcp.list", map[string]any{}, &res); err != nil || len(res.Servers) != 1 || !strings.Contains(res.Servers[0].Reason, "disabled") {
				t.Fatalf("mcp.list after disabling: %+v %v", res, err)
			}
			if err := e.c.Call(context.Background(), "mcp.update", map[string]any{"name": "gosrv", "patch": map[string]any{"disabled": false, "toolTimeoutSec": 30}}, nil); err != nil {
				t.Fatalf("mcp.update enable: %v", err)
			}
		},
		wrongType: func(e *env17) map[string]any {
			return map[string]any{"name": "gosrv", "patch": map[string]any{"disabled": "no"}}
		},
		unknownID:    ghost(map[string]any{"patch": map[string]any{"disabled": true}}),
		unknownInMsg: "ghost",
		unknownField: func(e *env17) map[string]any {
			return map[string]any{"name": "gosrv", "patch": map[string]any{"bogusField": 1}}
		},
	}, {
		method: "mcp.reload",
		valid:  func(t *testing.T, e *env17) map[string]any { return map[string]any{"name": "gosrv"} },
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			res := decode17[struct {
				OK      bool `json:"ok"`
				Servers []string
			}](t, raw)
			if !res.OK || strings.Join(res.Servers, ",") != "gosrv" {
				t.Fatalf("result %s", raw)
			}
			var all struct{ Servers []string }
			if err := e.c.Call(context.Background(), "mcp.reload", map[string]any{}, &all); err != nil || strings.Join(all.Servers, ",") != "gosrv" {
				t.Fatalf("reload all: %+v %v", all, err)
			}
			var tools struct{ Tools []struct{ Name string } }
			if err := e.c.Call(context.Background(), "tool.list", map[string]any{}, &tools); err != nil {
				t.Fatal(err)
			}
			found := false
			for _, tl := range tools.Tools {
				found = found || strings.HasPrefix(tl.Name, "mcp__gosrv__")
			}
			if !found {
				t.Fatalf("tool.list after reload has no gosrv tools: %+v", tools)
			}
		},
		wrongType:    func(e *env17) map[string]any { return map[string]any{"name": 1} },
		unknownID:    ghost(nil),
		unknownInMsg: "ghost",
		unknownField: func(e *env17) map[string]any { return map[string]any{"bogusField": 1} },
	}, {
		method: "mcp.remove",
		valid:  func(t *testing.T, e *env17) map[string]any { return map[string]any{"name": "gosrv", "scope": "global"} },
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			if got := listed(t, e); len(got) != 0 {
				t.Fatalf("mcp.list after remove: %v", got)
			}
		},
		wrongType:    func(e *env17) map[string]any { return map[string]any{"name": "gosrv", "scope": 2} },
		unknownID:    ghost(nil),
		unknownInMsg: "ghost",
		unknownField: func(e *env17) map[string]any { return map[string]any{"name": "gosrv", "bogusField": 1} },
	}}
}

func settingsContracts17(srv func() *httptest.Server) []contract17 {
	type doc struct {
		Settings map[string]any
	}
	section := func(d doc, path ...string) any {
		var v any = d.Settings
		for _, p := range path {
			m, _ := v.(map[string]any)
			v = m[p]
		}
		return v
	}
	return []contract17{{
		method: "settings.get",
		valid: func(t *testing.T, e *env17) map[string]any {
			return map[string]any{"scope": "global", "workdir": e.workdir}
		},
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			d := decode17[doc](t, raw)
			if section(d, "providers", "fake", "configured") != true || section(d, "providers", "fake", "default") != true {
				t.Fatalf("result %s, want the providers section", raw)
			}
		},
		wrongType: func(e *env17) map[string]any { return map[string]any{"scope": true} },
		unknownID: func(e *env17) map[string]any {
			return map[string]any{"workdir": filepath.Join(e.workdir, "no-such-dir")}
		},
		unknownInMsg: "no-such-dir",
		unknownField: func(e *env17) map[string]any { return map[string]any{"bogusField": 1} },
	}, {
		method: "settings.set",
		valid: func(t *testing.T, e *env17) map[string]any {
			return map[string]any{"scope": "global", "patch": map[string]any{
				"ui":        map[string]any{"theme": "dark", "font": map[string]any{"size": 13}},
				"providers": map[string]any{"openai": map[string]any{"api_key": secretKey17, "base_url": srv().URL + "/v1", "model": "model-b"}},
			}}
		},
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			noSecret(t, raw)
			d := decode17[doc](t, raw)
			if section(d, "ui", "theme") != "dark" || section(d, "providers", "openai", "configured") != true || section(d, "providers", "openai", "model") != "model-b" {
				t.Fatalf("result %s, want the merged document", raw)
			}
			var models struct{ Source string }
			if err := e.c.Call(context.Background(), "provider.models", map[string]any{"vendor": "openai"}, &models); err != nil || models.Source != "live" {
				t.Fatalf("the key set through settings does not reach the provider: %+v %v", models, err)
			}
			// A deep merge: null removes, the rest stays.
			var again json.RawMessage
			if err := e.c.Call(context.Background(), "settings.set", map[string]any{"patch": map[string]any{"ui": map[string]any{"theme": nil}}}, &again); err != nil {
				t.Fatal(err)
			}
			if d := decode17[doc](t, again); section(d, "ui", "theme") != nil || section(d, "ui", "font", "size") != 13.0 {
				t.Fatalf("after removing ui.theme: %s", again)
			}
			// Credentials are kept only by the provider configuration.
			err := e.c.Call(context.Background(), "settings.set", map[string]any{"patch": map[string]any{"gateway": map[string]any{"token": "t0k"}}}, nil)
			wantCode(t, err, "invalid_params", "credential")
			var got json.RawMessage
			if err := e.c.Call(context.Background(), "settings.get", map[string]any{}, &got); err != nil || strings.Contains(string(got), secretKey17) || strings.Contains(string(got), "t0k") {
				t.Fatalf("settings.get: %s %v", got, err)
			}
		},
		wrongType: func(e *env17) map[string]any { return map[string]any{"patch": "theme=dark"} },
		unknownID: func(e *env17) map[string]any {
			return map[string]any{"patch": map[string]any{"providers": map[string]any{"gemini": map[string]any{"model": "x"}}}}
		},
		unknownInMsg: "gemini",
		unknownField: func(e *env17) map[string]any { return map[string]any{"patch": map[string]any{}, "bogusField": 1} },
	}, {
		method: "system.reloadSettings",
		valid: func(t *testing.T, e *env17) map[string]any {
			// Changed behind the settings document's back.
			if err := e.c.Call(context.Background(), "provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{"model": "model-a"}}, nil); err != nil {
				t.Fatal(err)
			}
			return map[string]any{}
		},
		check: func(t *testing.T, e *env17, raw json.RawMessage) {
			res := decode17[struct {
				Reloaded    bool
				ChangedKeys []string
			}](t, raw)
			if !res.Reloaded || strings.Join(res.ChangedKeys, ",") != "providers" {
				t.Fatalf("result %s, want providers changed", raw)
			}
			var again struct {
				Reloaded    bool
				ChangedKeys []string
			}
			if err := e.c.Call(context.Background(), "system.reloadSettings", map[string]any{}, &again); err != nil || again.Reloaded || len(again.ChangedKeys) != 0 {
				t.Fatalf("a second reload: %+v %v, want nothing changed", again, err)
			}
		},
		// It takes no params, so no field can be mistyped: the case sends
		// its result's field with the wrong type.
		wrongType:    func(e *env17) map[string]any { return map[string]any{"reloaded": "yes"} },
		unknownField: func(e *env17) map[string]any { return map[string]any{"bogusField": 1} },
	}}
}

// TestCompat17AdminMethods runs every contract of the suite on one daemon.
func TestCompat17AdminMethods(t *testing.T) {
	d := startCompatDaemon(t)
	c := compatHello(t, d)
	workdir := t.TempDir()
	e := &env17{c: c, workdir: workdir, vals: map[string]string{}}
	e.sessionID = createSession(t, c, map[string]any{"workdir": workdir})
	var cases []contract17
	cases = append(cases, memoryContracts17()...)
	cases = append(cases, skillContracts17()...)
	cases = append(cases, mcpContracts17(t.TempDir())...)
	var srv *httptest.Server
	cases = append(cases, providerContracts17(func() *httptest.Server {
		if srv == nil {
			srv = modelServer17(t)
		}
		return srv
	})...)
	cases = append(cases, settingsContracts17(func() *httptest.Server {
		if srv == nil {
			srv = modelServer17(t)
		}
		return srv
	})...)
	runContracts17(t, e, cases)
}
