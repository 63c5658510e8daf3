package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/provider/providertest"
)

// lentToolCall is the params of tool.call as a test client decodes them.
type lentToolCall struct {
	SessionID string         `json:"sessionId"`
	TurnID    string         `json:"turnId"`
	CallID    string         `json:"callId"`
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
}

// toolMessages returns the contents of the tool-role messages of an
// OpenAI-format request, as JSON.
func toolMessages(r providertest.Request) []string {
	var out []string
	msgs, _ := r.JSON()["messages"].([]any)
	for _, m := range msgs {
		mm, _ := m.(map[string]any)
		if mm["role"] == "tool" {
			b, _ := json.Marshal(mm["content"])
			out = append(out, string(b))
		}
	}
	return out
}

// requestTools returns the names of the tools an OpenAI-format request offers.
func requestTools(r providertest.Request) []string {
	var out []string
	tools, _ := r.JSON()["tools"].([]any)
	for _, t := range tools {
		tm, _ := t.(map[string]any)
		fn, _ := tm["function"].(map[string]any)
		out = append(out, fmt.Sprint(fn["name"]))
	}
	return out
}

// startOpenAIDaemon starts a daemon whose openai provider is srv.
func startOpenAIDaemon(t *testing.T, srv *providertest.Server) *daemon.Daemon {
	t.Helper()
	t.Setenv("OPENAI_API_KEY", "sk-lent")
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
	d, err := daemon.Start(context.Background(), daemon.Config{Home: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

// toolCallTurn is an OpenAI-format answer calling one tool.
func toolCallTurn(id, name, args string) providertest.Reply {
	return providertest.NewOpenAIStream("gpt-4.1").ToolCall(0, id, name).ToolArgs(0, args).Finish("tool_calls").Usage(10, 2).Reply()
}

// toolResults returns the payloads of the tool.result events of evs.
func toolResults(evs []map[string]any) []map[string]any {
	var out []map[string]any
	for _, ev := range evs {
		if ev["kind"] == "tool.result" {
			out = append(out, payloadOf(ev))
		}
	}
	return out
}

// TestLentTool: a WebSocket client lends a tool (tool.register); the model
// sees it among its tools, a scripted turn calls it, the call reaches the
// client as tool.call with the turn's ids and the model's arguments, and
// the client's answer reaches the model in the next provider request.
// tool.list names it with source client; tool.unregister takes it back.
func TestLentTool(t *testing.T) {
	srv := providertest.NewServer(t,
		toolCallTurn("call_lent_1", "lookup_note", `{"key":"k1"}`),
		providertest.NewOpenAIStream("gpt-4.1").Text("Noted.").Finish("stop").Usage(10, 2).Reply())
	d := startOpenAIDaemon(t, srv)
	c := helloWS(t, d)
	calls := make(chan lentToolCall, 4)
	c.onRequest = func(method string, params json.RawMessage) (any, *errcode.Error) {
		if method != "tool.call" {
			return nil, errcode.New(errcode.Internal, "unexpected %s", method)
		}
		var call lentToolCall
		if err := json.Unmarshal(params, &call); err != nil {
			return nil, errcode.New(errcode.InvalidParams, "%v", err)
		}
		calls <- call
		return map[string]any{"output": "the note of " + fmt.Sprint(call.Arguments["key"]) + " is: buy milk", "isError": false}, nil
	}
	id := createSession(t, c, map[string]any{"provider": "openai", "model": "gpt-4.1", "mode": "auto"})
	var reg struct {
		Names []string `json:"names"`
	}
	if err := c.Call(context.Background(), "tool.register", map[string]any{"sessionId": id, "tools": []any{map[string]any{
		"name": "lookup_note", "description": "Looks up a note the person keeps in the editor.", "permission": "read",
		"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"key": map[string]any{"type": "string"}}, "required": []any{"key"}},
	}}}, &reg); err != nil {
		t.Fatalf("tool.register: %v", err)
	}
	if !slices.Equal(reg.Names, []string{"lookup_note"}) {
		t.Fatalf("tool.register names = %v", reg.Names)
	}
	var list struct {
		Tools []map[string]any `json:"tools"`
	}
	if err := c.Call(context.Background(), "tool.list", map[string]any{"sessionId": id}, &list); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tl := range list.Tools {
		if tl["name"] == "lookup_note" {
			found = true
			if tl["source"] != "client" || tl["permissionTag"] != "read" || tl["state"] != "active" {
				t.Errorf("tool.list lists the lent tool as %v", tl)
			}
		}
	}
	if !found {
		t.Fatalf("tool.list does not list the lent tool")
	}

	evs := promptComplete(t, c, id, "what is my note k1?")
	select {
	case call := <-calls:
		if call.SessionID != id || call.Name != "lookup_note" || call.CallID != "call_lent_1" || call.TurnID == "" || call.Arguments["key"] != "k1" {
			t.Errorf("tool.call params = %+v", call)
		}
	default:
		t.Fatal("the client got no tool.call")
	}
	res := toolResults(evs)
	if len(res) != 1 || res[0]["ok"] != true || !strings.Contains(fmt.Sprint(res[0]["output"]), "buy milk") {
		t.Fatalf("tool.result = %v", res)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d provider requests, want 2", len(reqs))
	}
	if tools := requestTools(reqs[0]); !slices.Contains(tools, "lookup_note") || !slices.Contains(tools, "read_file") {
		t.Errorf("the model was offered %v, want lookup_note among the built-ins", tools)
	}
	if msgs := toolMessages(reqs[1]); len(msgs) != 1 || !strings.Contains(msgs[0], "the note of k1 is: buy milk") {
		t.Errorf("the model's next request carries tool messages %v, want the client's answer", msgs)
	}

	var un struct {
		Removed []string `json:"removed"`
	}
	if err := c.Call(context.Background(), "tool.unregister", map[string]any{"sessionId": id, "names": []any{"lookup_note"}}, &un); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(un.Removed, []string{"lookup_note"}) {
		t.Errorf("tool.unregister removed %v", un.Removed)
	}
}

// TestLentToolDisconnect: the connection that lent a tool closes while
// the model's call of it waits for its answer: the call fails (ok:false,
// saying the client disconnected), the turn goes on to the model's next
// answer, and the tool is no longer the session's.
func TestLentToolDisconnect(t *testing.T) {
	srv := providertest.NewServer(t,
		toolCallTurn("call_lent_2", "editor_query", `{}`),
		providertest.NewOpenAIStream("gpt-4.1").Text("Went on without it.").Finish("stop").Usage(10, 2).Reply())
	d := startOpenAIDaemon(t, srv)
	owner := helloWS(t, d)
	id := createSession(t, owner, map[string]any{"provider": "openai", "model": "gpt-4.1", "mode": "auto"})

	// Another connection lends the tool to the session, and hangs up
	// once the call reaches it.
	lender := helloWS(t, d)
	called := make(chan struct{})
	lender.onRequest = func(method string, params json.RawMessage) (any, *errcode.Error) {
		close(called)
		lender.Close()
		return nil, errcode.New(errcode.Internal, "closed")
	}
	if err := lender.Call(context.Background(), "tool.register", map[string]any{"sessionId": id, "tools": []any{map[string]any{
		"name": "editor_query", "description": "Asks the editor.", "permission": "read",
	}}}, nil); err != nil {
		t.Fatalf("tool.register: %v", err)
	}

	evs := promptComplete(t, owner, id, "ask the editor")
	<-called
	res := toolResults(evs)
	if len(res) != 1 || res[0]["ok"] != false || !strings.Contains(fmt.Sprint(res[0]["error"]), "disconnected") {
		t.Fatalf("tool.result = %v, want ok:false saying the client disconnected", res)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d provider requests, want 2 (the turn goes on)", len(reqs))
	}
	if msgs := toolMessages(reqs[1]); len(msgs) != 1 || !strings.Contains(msgs[0], "disconnected") {
		t.Errorf("the model's next request carries tool messages %v, want the failure", msgs)
	}

	// The lender's tools vanish with its connection.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var list struct {
			Tools []map[string]any `json:"tools"`
		}
		if err := owner.Call(context.Background(), "tool.list", map[string]any{"sessionId": id}, &list); err != nil {
			t.Fatal(err)
		}
		lent := false
		for _, tl := range list.Tools {
			lent = lent || tl["name"] == "editor_query"
		}
		if !lent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed connection's tool is still listed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLentToolInvalid: tool.register refuses bad input with the
// documented codes, naming the field; REST cannot lend (unsupported,
// data.field transport), as it could not answer the calls.
func TestLentToolInvalid(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	id := createSession(t, c, nil)
	tl := func(name string, extra map[string]any) map[string]any {
		m := map[string]any{"name": name, "description": "d", "permission": "read"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name   string
		params map[string]any
		code   string
		field  string
	}{
		{"no tools", map[string]any{"sessionId": id, "tools": []any{}}, errcode.InvalidParams, "tools"},
		{"duplicate", map[string]any{"sessionId": id, "tools": []any{tl("x", nil), tl("x", nil)}}, errcode.InvalidParams, "tools[1].name"},
		{"built-in", map[string]any{"sessionId": id, "tools": []any{tl("read_file", nil)}}, errcode.InvalidParams, "tools[0].name"},
		{"replace a non-built-in", map[string]any{"sessionId": id, "tools": []any{tl("mine", map[string]any{"replace": true})}}, errcode.InvalidParams, "tools[0].replace"},
		{"bad name", map[string]any{"sessionId": id, "tools": []any{tl("no spaces please", nil)}}, errcode.InvalidParams, "tools[0].name"},
		{"bad permission", map[string]any{"sessionId": id, "tools": []any{tl("x", map[string]any{"permission": "secret"})}}, errcode.InvalidParams, ""},
		{"schema not an object type", map[string]any{"sessionId": id, "tools": []any{tl("x", map[string]any{"inputSchema": map[string]any{"type": "string"}})}}, errcode.InvalidParams, "tools[0].inputSchema"},
		{"schema that does not compile", map[string]any{"sessionId": id, "tools": []any{tl("x", map[string]any{"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": 7}}}})}}, errcode.InvalidParams, "tools[0].inputSchema"},
		{"unknown session", map[string]any{"sessionId": "no-such-session", "tools": []any{tl("x", nil)}}, errcode.NotFound, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Call(context.Background(), "tool.register", tc.params, nil)
			if err == nil || err.StringCode() != tc.code {
				t.Fatalf("tool.register = %v, want %s", err, tc.code)
			}
			if tc.field != "" && fmt.Sprint(err.Data["field"]) != tc.field {
				t.Errorf("data.field = %v, want %s (%s)", err.Data["field"], tc.field, err.Message)
			}
		})
	}
	// Replacing a built-in is allowed, and a name this connection lent
	// may be lent again (redefined).
	for range 2 {
		if err := c.Call(context.Background(), "tool.register", map[string]any{"sessionId": id, "tools": []any{tl("read_file", map[string]any{"replace": true})}}, nil); err != nil {
			t.Fatalf("replace read_file: %v", err)
		}
	}
	// Another connection may not take a name this one lent to the session.
	other := helloWS(t, d)
	if err := other.Call(context.Background(), "tool.register", map[string]any{"sessionId": id, "tools": []any{tl("read_file", map[string]any{"replace": true})}}, nil); err == nil || err.StringCode() != errcode.InvalidParams {
		t.Errorf("a second lender of read_file: %v, want invalid_params", err)
	}

	status, body := restCall(t, d, restRoute{Verb: "POST", Path: "/v1/tool/register"}, map[string]any{"sessionId": id, "tools": []any{tl("x", nil)}})
	var rerr struct {
		Code string         `json:"code"`
		Data map[string]any `json:"data"`
	}
	_ = json.Unmarshal(body, &rerr)
	if status == http.StatusOK || !strings.Contains(string(body), `"unsupported"`) || !strings.Contains(string(body), "transport") {
		t.Errorf("REST tool.register: HTTP %d %s, want unsupported naming the transport", status, body)
	}
}
