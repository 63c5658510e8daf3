package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/provider/providertest"
)

// providerEnv are the environment variables the provider detection reads;
// each test sets all of them so that the machine's own do not leak in.
var providerEnv = []string{"OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "TRELLIS_PROVIDER"}

// startProviderDaemon runs a daemon with no --provider, in home, with the
// given provider environment (anything unnamed is cleared).
func startProviderDaemon(t *testing.T, home string, env map[string]string) *daemon.Daemon {
	t.Helper()
	for _, k := range providerEnv {
		t.Setenv(k, env[k])
	}
	d, err := daemon.Start(context.Background(), daemon.Config{Home: home, LogLevel: "debug"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

// turn prompts a session and returns its events up to turn.done.
func turn(t *testing.T, c client, id, text string) []map[string]any {
	t.Helper()
	if err := c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": text}, nil); err != nil {
		t.Fatalf("prompt %q: %v", text, err)
	}
	return collect(t, c.Events(id), "turn.done", 1)
}

func only(t *testing.T, evs []map[string]any, kind string) map[string]any {
	t.Helper()
	found := findKind(evs, kind)
	if len(found) != 1 {
		t.Fatalf("%d %s events, want 1: %v", len(found), kind, eventKinds(evs))
	}
	return found[0]
}

func texts(evs []map[string]any, kind string) string {
	var b strings.Builder
	for _, p := range findKind(evs, kind) {
		b.WriteString(fmt.Sprint(p["text"]))
	}
	return b.String()
}

// messages returns the "messages" of a recorded request.
func messages(t *testing.T, r providertest.Request) []map[string]any {
	t.Helper()
	raw, _ := json.Marshal(r.JSON()["messages"])
	var out []map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("messages of %s: %v", r.Body, err)
	}
	return out
}

func jsonEqual(t *testing.T, what string, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	g, _ := json.Marshal(got)
	var gv any
	_ = json.Unmarshal(g, &gv)
	if !reflect.DeepEqual(gv, w) {
		t.Errorf("%s =\n%s\nwant\n%s", what, g, want)
	}
}

func TestProviderOpenAIAgentLoop(t *testing.T) {
	const key = "sk-e2e-openai-KEYKEYKEY"
	srv := providertest.NewServer(t,
		providertest.NewOpenAIStream("gpt-4.1").
			Reasoning("Let me ").Reasoning("check.").
			Text("Looking ").Text("around.").
			ToolCall(0, "call_1", "list_dir").ToolArgs(0, `{"pa`).ToolArgs(0, `th":`).ToolArgs(0, ` "."}`).
			Finish("tool_calls").Usage(120, 30).Reply(),
		providertest.NewOpenAIStream("gpt-4.1").Text("It holds ").Text("a.txt.").Finish("stop").Usage(200, 12).Reply())
	d := startProviderDaemon(t, t.TempDir(), map[string]string{"OPENAI_API_KEY": key, "OPENAI_BASE_URL": srv.URL + "/v1"})
	c := dialGRPC(t, d)
	wd := t.TempDir()
	os.WriteFile(filepath.Join(wd, "a.txt"), []byte("x"), 0o644)
	id := createSession(t, c, map[string]any{"workdir": wd})

	evs := turn(t, c, id, "what is in here?")
	if got := texts(evs, "message.reasoning"); got != "Let me check." {
		t.Errorf("reasoning %q", got)
	}
	if got := texts(evs, "message.delta"); got != "Looking around.It holds a.txt." {
		t.Errorf("deltas %q", got)
	}
	call := only(t, evs, "tool.call")
	jsonEqual(t, "tool.call", call, `{"callId":"call_1","name":"list_dir","args":{"path":"."}}`)
	if res := only(t, evs, "tool.result"); res["ok"] != true || !strings.Contains(fmt.Sprint(res["output"]), "a.txt") {
		t.Errorf("tool.result %v", res)
	}
	usage := findKind(evs, "usage")
	if len(usage) != 2 {
		t.Fatalf("usage events %d: %v", len(usage), eventKinds(evs))
	}
	// Priced by the built-in table: gpt-4.1 at $2 in and $8 out per million tokens.
	tid := only(t, evs, "turn.done")["turnId"]
	jsonEqual(t, "usage 1", usage[0], fmt.Sprintf(`{"inputTokens":120,"outputTokens":30,"provider":"openai","model":"gpt-4.1","reasoningTokens":0,
		"cacheReadTokens":0,"cacheWriteTokens":0,"costMicroUsd":480,"priced":true,"turnId":%q}`, tid))
	jsonEqual(t, "usage 2", usage[1], fmt.Sprintf(`{"inputTokens":200,"outputTokens":12,"provider":"openai","model":"gpt-4.1","reasoningTokens":0,
		"cacheReadTokens":0,"cacheWriteTokens":0,"costMicroUsd":496,"priced":true,"turnId":%q}`, tid))
	jsonEqual(t, "context", only(t, evs, "context"), `{"used":212,"window":1047576,"percent":0}`)
	if done := only(t, evs, "turn.done"); done["reason"] != "complete" {
		t.Errorf("turn.done %v", done)
	}

	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	for _, r := range reqs {
		body := r.JSON()
		if r.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer "+key ||
			body["model"] != "gpt-4.1" || body["stream"] != true {
			t.Errorf("request %s auth=%q model=%v stream=%v", r.Path, r.Header.Get("Authorization"), body["model"], body["stream"])
		}
		jsonEqual(t, "stream_options", body["stream_options"], `{"include_usage":true}`)
	}
	var tools []map[string]any
	raw, _ := json.Marshal(reqs[0].JSON()["tools"])
	json.Unmarshal(raw, &tools)
	var listDir map[string]any
	for _, tool := range tools {
		if fn, _ := tool["function"].(map[string]any); fn["name"] == "list_dir" {
			listDir = tool
		}
	}
	if listDir == nil || listDir["type"] != "function" || listDir["function"].(map[string]any)["parameters"].(map[string]any)["type"] != "object" {
		t.Errorf("list_dir tool schema %v (of %d tools)", listDir, len(tools))
	}
	first := messages(t, reqs[0])
	if len(first) != 2 || first[0]["role"] != "system" || first[1]["role"] != "user" || first[1]["content"] != "what is in here?" {
		t.Errorf("first request messages %v", first)
	}
	second := messages(t, reqs[1])
	if len(second) != 4 {
		t.Fatalf("second request messages %v", second)
	}
	jsonEqual(t, "assistant message", second[2],
		`{"role":"assistant","content":"Looking around.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"list_dir","arguments":"{\"path\": \".\"}"}}]}`)
	if tm := second[3]; tm["role"] != "tool" || tm["tool_call_id"] != "call_1" || !strings.Contains(fmt.Sprint(tm["content"]), "a.txt") {
		t.Errorf("tool result fed back %v", tm)
	}

	var list struct {
		Sessions []map[string]any `json:"sessions"`
	}
	c.Call(context.Background(), "session.list", map[string]any{}, &list)
	if s := list.Sessions[0]; s["provider"] != "openai" || s["model"] != "gpt-4.1" {
		t.Errorf("session provider %v model %v", s["provider"], s["model"])
	}
}

func TestProviderAnthropicConfiguredPerSessionModel(t *testing.T) {
	const key = "sk-ant-e2e-KEYKEYKEY"
	srv := providertest.NewServer(t,
		providertest.NewAnthropicStream("claude-haiku-4-5", 472).
			Thinking("The user ", "wants the file.").Ping().
			Text("Reading ", "it.").
			ToolUse("toolu_1", "read_file", providertest.SplitEvery(`{"path": "a.txt"}`, 5)...).
			Reply("tool_use", 89),
		providertest.NewAnthropicStream("claude-haiku-4-5", 600).Text("It says hello.").Reply("end_turn", 7),
		providertest.NewAnthropicStream("claude-opus-4-1", 700).Text("Still hello.").Reply("end_turn", 4))
	d := startProviderDaemon(t, t.TempDir(), nil)
	ws := helloWS(t, d)
	ctx := context.Background()
	if err := ws.Call(ctx, "provider.configure", map[string]any{"vendor": "anthropic",
		"config": map[string]any{"api_key": key, "base_url": srv.URL, "model": "claude-sonnet-4-5"}}, nil); err != nil {
		t.Fatal(err)
	}
	c := dialGRPC(t, d)
	wd := t.TempDir()
	os.WriteFile(filepath.Join(wd, "a.txt"), []byte("hello"), 0o644)
	id := createSession(t, c, map[string]any{"workdir": wd, "provider": "anthropic", "model": "claude-haiku-4-5"})

	evs := turn(t, c, id, "read a.txt")
	if got := texts(evs, "message.reasoning"); got != "The user wants the file." {
		t.Errorf("reasoning %q", got)
	}
	jsonEqual(t, "tool.call", only(t, evs, "tool.call"), `{"callId":"toolu_1","name":"read_file","args":{"path":"a.txt"}}`)
	usage := findKind(evs, "usage")
	if len(usage) != 2 {
		t.Fatalf("usage events: %v", eventKinds(evs))
	}
	// claude-haiku-4-5 at $1 in and $5 out per million tokens.
	jsonEqual(t, "usage", usage[0], fmt.Sprintf(`{"inputTokens":472,"outputTokens":89,"provider":"anthropic","model":"claude-haiku-4-5","reasoningTokens":0,
		"cacheReadTokens":0,"cacheWriteTokens":0,"costMicroUsd":917,"priced":true,"turnId":%q}`, only(t, evs, "turn.done")["turnId"]))
	jsonEqual(t, "context", only(t, evs, "context"), `{"used":607,"window":200000,"percent":0.3}`)
	if only(t, evs, "turn.done")["reason"] != "complete" {
		t.Errorf("turn did not complete: %v", eventKinds(evs))
	}

	// The /model command switches the session's model for the next turn.
	turn(t, c, id, "/model claude-opus-4-1")
	evs = turn(t, c, id, "again?")
	jsonEqual(t, "usage", findKind(evs, "usage")[0], fmt.Sprintf(`{"inputTokens":700,"outputTokens":4,"provider":"anthropic","model":"claude-opus-4-1","reasoningTokens":0,
		"cacheReadTokens":0,"cacheWriteTokens":0,"costMicroUsd":10800,"priced":true,"turnId":%q}`, only(t, evs, "turn.done")["turnId"]))

	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	for i, model := range []string{"claude-haiku-4-5", "claude-haiku-4-5", "claude-opus-4-1"} {
		r := reqs[i]
		body := r.JSON()
		if r.Path != "/v1/messages" || body["model"] != model || body["stream"] != true || body["max_tokens"] == nil ||
			r.Header.Get("Authorization") != "Bearer "+key {
			t.Errorf("request %d: %s model=%v stream=%v max_tokens=%v", i, r.Path, body["model"], body["stream"], body["max_tokens"])
		}
		if sys, _ := body["system"].([]any); len(sys) != 1 {
			t.Errorf("request %d system %v", i, body["system"])
		}
	}
	second := messages(t, reqs[1])
	if len(second) != 3 {
		t.Fatalf("second request messages %v", second)
	}
	jsonEqual(t, "assistant turn", second[1], `{"role":"assistant","content":[{"type":"text","text":"Reading it."},
		{"type":"tool_use","id":"toolu_1","name":"read_file","input":{"path":"a.txt"}}]}`)
	result := second[2]["content"].([]any)[0].(map[string]any)
	if second[2]["role"] != "user" || result["type"] != "tool_result" || result["tool_use_id"] != "toolu_1" ||
		!strings.Contains(fmt.Sprint(result["content"]), "hello") || result["is_error"] != false {
		t.Errorf("tool result fed back %v", second[2])
	}
	var tools []map[string]any
	raw, _ := json.Marshal(reqs[0].JSON()["tools"])
	json.Unmarshal(raw, &tools)
	found := false
	for _, tool := range tools {
		if tool["name"] == "read_file" {
			found = tool["input_schema"].(map[string]any)["type"] == "object"
		}
	}
	if !found {
		t.Errorf("read_file tool schema missing from %d tools", len(tools))
	}
}

func TestProviderFailuresAndRetries(t *testing.T) {
	const key = "sk-e2e-retry-KEYKEYKEY"
	srv := providertest.NewServer(t)
	home := t.TempDir()
	d := startProviderDaemon(t, home, map[string]string{"OPENAI_API_KEY": key, "OPENAI_BASE_URL": srv.URL + "/v1"})
	c := dialGRPC(t, d)
	ok := func(text string) providertest.Reply {
		return providertest.NewOpenAIStream("gpt-4.1").Text(text).Finish("stop").Usage(10, 2).Reply()
	}

	t.Run("500 then success", func(t *testing.T) {
		before := len(srv.Requests())
		srv.Enqueue(providertest.OpenAIError(500, "The server had an error while processing your request.", "server_error", "", nil), ok("recovered"))
		evs := turn(t, c, createSession(t, c, nil), "hi")
		if only(t, evs, "turn.done")["reason"] != "complete" || texts(evs, "message.delta") != "recovered" || len(findKind(evs, "error")) != 0 {
			t.Errorf("events %v", eventKinds(evs))
		}
		if n := len(srv.Requests()) - before; n != 2 {
			t.Errorf("%d requests, want 2", n)
		}
	})

	t.Run("401 fails once and clearly", func(t *testing.T) {
		before := len(srv.Requests())
		srv.Enqueue(providertest.OpenAIError(401, "Incorrect API key provided: "+key+". You can find your API key at https://platform.openai.com/account/api-keys.",
			"invalid_request_error", "invalid_api_key", nil))
		evs := turn(t, c, createSession(t, c, nil), "hi")
		e := only(t, evs, "error")
		msg := fmt.Sprint(e["message"])
		if e["code"] != "provider_error" || !strings.Contains(msg, "openai") || !strings.Contains(msg, "HTTP 401") || strings.Contains(msg, key) {
			t.Errorf("error event %v", e)
		}
		if only(t, evs, "turn.done")["reason"] != "error" || len(findKind(evs, "usage")) != 0 {
			t.Errorf("events %v", eventKinds(evs))
		}
		if n := len(srv.Requests()) - before; n != 1 {
			t.Errorf("%d requests, want 1 (no retry storm)", n)
		}
	})

	t.Run("429 honours Retry-After", func(t *testing.T) {
		before := len(srv.Requests())
		srv.Enqueue(providertest.OpenAIError(429, "Rate limit reached for requests", "requests", "rate_limit_exceeded",
			map[string]string{"Retry-After": "1"}), ok("after the wait"))
		evs := turn(t, c, createSession(t, c, nil), "hi")
		if only(t, evs, "turn.done")["reason"] != "complete" {
			t.Errorf("events %v", eventKinds(evs))
		}
		reqs := srv.Requests()[before:]
		if len(reqs) != 2 {
			t.Fatalf("%d requests", len(reqs))
		}
		// The wait the daemon announced is the server's 1 s plus at most
		// a tenth of jitter (never less, never a backoff of its own), and
		// the server saw the retry no sooner.
		r := only(t, evs, "provider.retry")
		wait, _ := r["waitMs"].(float64)
		if r["reason"] != "rate_limited" || wait < 1000 || wait > 1100 {
			t.Errorf("provider.retry %v, want rate_limited with waitMs in 1000..1100 (Retry-After: 1)", r)
		}
		if gap := reqs[1].At.Sub(reqs[0].At); gap < time.Duration(wait)*time.Millisecond {
			t.Errorf("waited %v between the 429 and the retry, want the %v ms announced", gap, wait)
		}
	})

	t.Run("context window full", func(t *testing.T) {
		srv.Enqueue(providertest.OpenAIError(400, "This model's maximum context length is 1047576 tokens. However, your messages resulted in 1100000 tokens.",
			"invalid_request_error", "context_length_exceeded", nil))
		evs := turn(t, c, createSession(t, c, nil), "hi")
		e := only(t, evs, "error")
		if msg := fmt.Sprint(e["message"]); e["code"] != "provider_error" || !strings.Contains(msg, "context window is full") || !strings.Contains(msg, "/compact") {
			t.Errorf("error event %v", e)
		}
	})

	t.Run("interrupt closes the request", func(t *testing.T) {
		srv.Enqueue(providertest.Reply{Events: providertest.NewOpenAIStream("gpt-4.1").Text("streaming...").Events(), Hang: true})
		id := createSession(t, c, nil)
		if err := c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": "hi"}, nil); err != nil {
			t.Fatal(err)
		}
		collect(t, c.Events(id), "message.delta", 1)
		if err := c.Call(context.Background(), "session.interrupt", map[string]any{"sessionId": id}, nil); err != nil {
			t.Fatal(err)
		}
		evs := collect(t, c.Events(id), "turn.done", 1)
		if payloadOf(evs[len(evs)-1])["reason"] != "interrupted" {
			t.Errorf("events %v", eventKinds(evs))
		}
		select {
		case <-srv.ClientGone():
		case <-time.After(5 * time.Second):
			t.Fatal("the model server did not see the request close")
		}
	})

	t.Run("the key is in no log line", func(t *testing.T) {
		logs, err := os.ReadFile(daemon.LogPath(home))
		if err != nil || len(logs) == 0 {
			t.Fatalf("log: %v", err)
		}
		if bytes.Contains(logs, []byte(key)) || bytes.Contains(logs, []byte("KEYKEYKEY")) {
			t.Error("the daemon log holds the API key")
		}
		if !bytes.Contains(logs, []byte("retrying")) {
			t.Error("retries are not logged")
		}
	})
}

func TestProviderConfigureListAndSecrets(t *testing.T) {
	const key = "sk-e2e-configured-KEYKEYKEY"
	srv := providertest.NewServer(t,
		providertest.OpenAIError(401, "Incorrect API key provided: sk-e2e-co*****************KEY.", "invalid_request_error", "invalid_api_key", nil),
		providertest.NewOpenAIStream("local-model").Text("configured answer").Finish("stop").Usage(9, 3).Reply())
	home := t.TempDir()
	d := startProviderDaemon(t, home, nil)
	ctx := context.Background()
	ws := helloWS(t, d)
	var hello struct {
		Capabilities []string `json:"capabilities"`
	}
	if err := dialWS(t, d).Call(ctx, "system.hello", map[string]any{"token": d.Token(), "clientVersion": "t", "protocolVersion": "1.0.0"}, &hello); err != nil ||
		!contains(hello.Capabilities, "providers") {
		t.Errorf("capabilities %v, %v", hello.Capabilities, err)
	}

	listProviders := func(c client) (map[string]map[string]any, string) {
		var res struct {
			Providers []map[string]any `json:"providers"`
		}
		if err := c.Call(ctx, "provider.list", map[string]any{}, &res); err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(res)
		out := map[string]map[string]any{}
		for _, p := range res.Providers {
			out[p["vendor"].(string)] = p
			for _, f := range []string{"vendor", "label", "defaultModel", "models", "configured", "default", "baseUrl", "authMethods"} {
				if _, ok := p[f]; !ok {
					t.Errorf("provider %v lacks %s", p["vendor"], f)
				}
			}
		}
		return out, string(raw)
	}

	// Nothing in the environment: the offline fake is the default.
	ps, _ := listProviders(ws)
	if len(ps) != 3 || ps["fake"]["default"] != true || ps["openai"]["configured"] != false || ps["anthropic"]["configured"] != false {
		t.Fatalf("providers %v", ps)
	}
	grpcC := dialGRPC(t, d)
	for _, c := range []client{ws, grpcC} {
		for _, tc := range []struct {
			method string
			params map[string]any
			code   string
		}{
			{"provider.configure", map[string]any{"vendor": "gemini", "config": map[string]any{"api_key": "x"}}, "not_found"},
			{"provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{}}, "invalid_params"},
			{"provider.configure", map[string]any{"vendor": "openai"}, "invalid_params"},
			{"provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{"base_url": "localhost"}}, "invalid_params"},
			{"provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{"default": true}}, "invalid_params"},
			{"provider.loginWeb", map[string]any{"vendor": "openai", "method": "browser"}, "login_unsupported"},
			{"session.create", map[string]any{"workdir": t.TempDir(), "provider": "anthropic"}, "invalid_params"},
		} {
			if err := c.Call(ctx, tc.method, tc.params, nil); err == nil || err.StringCode() != tc.code {
				t.Errorf("%s %v: %v, want %s", tc.method, tc.params, err, tc.code)
			}
		}
	}

	if err := ws.Call(ctx, "provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{
		"api_key": key, "base_url": srv.URL + "/v1", "model": "local-model", "models": []string{"local-model", "other"}, "default": true}}, nil); err != nil {
		t.Fatal(err)
	}
	ps, raw := listProviders(grpcC)
	if strings.Contains(raw, "KEYKEYKEY") {
		t.Fatalf("provider.list shows the key: %s", raw)
	}
	jsonEqual(t, "openai", ps["openai"], fmt.Sprintf(`{"vendor":"openai","label":%q,"defaultModel":"local-model","models":["local-model","other"],
		"configured":true,"default":true,"baseUrl":%q,"authMethods":["api_key"]}`, ps["openai"]["label"], srv.URL+"/v1"))
	if ps["fake"]["default"] != false {
		t.Errorf("fake still default")
	}
	secret := filepath.Join(home, "secrets", "openai.json")
	if fi, err := os.Stat(secret); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("secret file %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Dir(secret)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("secrets dir %v %v", fi, err)
	}

	// Sessions now use it: a failing turn and a good one.
	c := dialGRPC(t, d)
	id := createSession(t, c, nil)
	var all []map[string]any
	all = append(all, turn(t, c, id, "first")...)
	all = append(all, turn(t, c, id, "second")...)
	if texts(all, "message.delta") != "configured answer" || len(findKind(all, "error")) != 1 {
		t.Errorf("events %v", eventKinds(all))
	}
	for _, r := range srv.Requests() {
		if r.Header.Get("Authorization") != "Bearer "+key || r.JSON()["model"] != "local-model" {
			t.Errorf("request auth %q model %v", r.Header.Get("Authorization"), r.JSON()["model"])
		}
	}
	var resumed struct {
		Events []map[string]any `json:"events"`
	}
	if err := c.Call(ctx, "session.resume", map[string]any{"sessionId": id}, &resumed); err != nil {
		t.Fatal(err)
	}
	stored, _ := json.Marshal(resumed.Events)
	if len(resumed.Events) == 0 || bytes.Contains(stored, []byte("KEYKEYKEY")) {
		t.Errorf("%d stored events; the key in them: %v", len(resumed.Events), bytes.Contains(stored, []byte("KEYKEYKEY")))
	}

	// The configuration survives a restart.
	d.Stop()
	d2 := startProviderDaemon(t, home, nil)
	ps, _ = listProviders(helloWS(t, d2))
	if ps["openai"]["configured"] != true || ps["openai"]["default"] != true || ps["openai"]["defaultModel"] != "local-model" {
		t.Errorf("after restart: %v", ps["openai"])
	}
	logs, _ := os.ReadFile(daemon.LogPath(home))
	if len(logs) == 0 || bytes.Contains(logs, []byte("KEYKEYKEY")) {
		t.Errorf("log of %d bytes holds the key: %v", len(logs), bytes.Contains(logs, []byte("KEYKEYKEY")))
	}
}

func TestProviderFlagStillWins(t *testing.T) {
	for _, k := range providerEnv {
		t.Setenv(k, "")
	}
	t.Setenv("OPENAI_API_KEY", "sk-e2e-ignored")
	d := startDaemon(t) // --provider fake:<script>
	c := dialGRPC(t, d)
	evs := turn(t, c, createSession(t, c, nil), "hello")
	if u := findKind(evs, "usage")[0]; u["provider"] != "fake" {
		t.Errorf("usage %v", u)
	}
}
