package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/tool/browser"
)

// browserPage has a button that changes the text and a field whose typing
// shows up in the page; its refs are e1 (the button) and e2 (the field).
const browserPage = `<!doctype html><title>Browser e2e</title>
<h1 id="msg">Before the click</h1>
<button onclick="document.getElementById('msg').textContent = 'After the click'">Change</button>
<input id="name" oninput="document.getElementById('echo').textContent = 'typed: ' + this.value">
<p id="echo"></p>`

// browserProcesses counts the processes of the browsers whose profiles are
// under home's profile root, and the profiles left.
func browserProcesses(home string) (procs, profiles int) {
	root := filepath.Join(home, "browser")
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		procs += len(browser.ProfileProcesses(filepath.Join(root, e.Name()), false))
	}
	return procs, len(entries)
}

// The model drives the browser through the daemon: it navigates to a page
// served on 127.0.0.1 (allowed by --web-fetch-allow-private), reads it,
// clicks the button, reads the change, types, and takes a screenshot the
// test decodes as a PNG; the browser ends with its session, and another
// one with the daemon.
func TestBrowserTool(t *testing.T) {
	found := false
	for _, name := range browser.DefaultChromium {
		if _, err := exec.LookPath(name); err == nil {
			found = true
		}
	}
	if !found {
		t.Skip("the browser tool needs Chromium on PATH (apt-get install chromium)")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, browserPage)
	}))
	defer srv.Close()
	home := t.TempDir()
	script := filepath.Join(home, "script.json")
	os.WriteFile(script, []byte(`{"steps":[
 {"match":"browse","tool_calls":[{"name":"browser","arguments":{"action":"navigate","url":"`+srv.URL+`"}}]},
 {"after_tool":"browser","tool_calls":[{"name":"browser","arguments":{"action":"read"}}]},
 {"after_tool":"browser","tool_calls":[{"name":"browser","arguments":{"action":"click","ref":"e1"}}]},
 {"after_tool":"browser","tool_calls":[{"name":"browser","arguments":{"action":"read","outline":false}}]},
 {"after_tool":"browser","tool_calls":[{"name":"browser","arguments":{"action":"type","selector":"#name","text":"hello"}}]},
 {"after_tool":"browser","tool_calls":[{"name":"browser","arguments":{"action":"screenshot"}}]},
 {"after_tool":"browser","text":"Browsed."}],"repeat":true}`), 0o600)
	d, err := daemon.Start(context.Background(), daemon.Config{Home: home, Provider: "fake:" + script, WebFetchAllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			d.Stop()
		}
	})
	c := helloWS(t, d)
	a := &approver{reply: map[string]any{"decision": "allow"}}
	c.onRequest = a.handle
	ctx := context.Background()

	id := createSession(t, c, map[string]any{"mode": "accept"})
	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "browse the test page"}, nil)
	evs := collect(t, c.Events(id), "turn.done", 1)
	res := findKind(evs, "tool.result")
	if len(res) != 6 {
		t.Fatalf("%d tool.result, want 6: %v", len(res), eventKinds(evs))
	}
	for i, r := range res {
		if r["ok"] != true {
			t.Fatalf("call %d failed: %v", i, r)
		}
	}
	out := func(i int) string { return res[i]["output"].(string) }
	if !strings.Contains(out(0), "Title: Browser e2e") || !strings.Contains(out(1), "Before the click") || !strings.Contains(out(1), `[e1] button "Change"`) {
		t.Fatalf("navigate and read:\n%s\n%s", out(0), out(1))
	}
	if !strings.Contains(out(3), "After the click") || strings.Contains(out(3), "Before the click") {
		t.Fatalf("read after the click:\n%s", out(3))
	}
	m := regexp.MustCompile(`PNG 1280x800, \d+ bytes.*\nKept at (\S+)`).FindStringSubmatch(out(5))
	if m == nil {
		t.Fatalf("screenshot:\n%s", out(5))
	}
	shot, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(shot)); err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if a.count() == 0 || a.asked[0]["permissionTag"] != "network" {
		t.Fatalf("approvals %v", a.asked)
	}

	if n, _ := browserProcesses(home); n == 0 {
		t.Fatal("no browser runs for the session")
	}
	if err := c.Call(ctx, "session.close", map[string]any{"sessionId": id}, nil); err != nil {
		t.Fatal(err)
	}
	if n, p := browserProcesses(home); n > 0 || p > 0 {
		t.Fatalf("after session.close: %d browser processes, %d profiles", n, p)
	}

	id = createSession(t, c, map[string]any{"mode": "accept"})
	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "browse again"}, nil)
	collect(t, c.Events(id), "turn.done", 1)
	if n, _ := browserProcesses(home); n == 0 {
		t.Fatal("no browser runs for the second session")
	}
	d.Stop()
	stopped = true
	if n, p := browserProcesses(home); n > 0 || p > 0 {
		t.Fatalf("after the daemon stopped: %d browser processes, %d profiles", n, p)
	}
}

// Without Chromium the call fails with browser_provider_unavailable: an
// error event with that code, then a failed tool.result.
func TestBrowserToolWithoutChromium(t *testing.T) {
	home := t.TempDir()
	script := filepath.Join(home, "script.json")
	os.WriteFile(script, []byte(`{"steps":[
 {"match":"browse","tool_calls":[{"name":"browser","arguments":{"action":"navigate","url":"http://example.com/"}}]},
 {"after_tool":"browser","text":"No browser."}]}`), 0o600)
	d, err := daemon.Start(context.Background(), daemon.Config{Home: home, Provider: "fake:" + script, BrowserChromium: filepath.Join(home, "no-chromium")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	c := helloWS(t, d)
	id := createSession(t, c, map[string]any{"mode": "auto"})
	c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": "browse"}, nil)
	evs := collect(t, c.Events(id), "turn.done", 1)
	errEvs, res := findKind(evs, "error"), findKind(evs, "tool.result")
	if len(errEvs) != 1 || errEvs[0]["code"] != errcode.BrowserProviderUnavailable || len(res) != 1 || res[0]["ok"] != false {
		t.Fatalf("error events %v, tool.result %v", errEvs, res)
	}
}

// session.setBrowserProvider: none turns the session's browser off (its
// calls fail with browser_provider_unavailable), host sends them to the
// browser a client lent (TestHostBrowser), and another value is
// invalid_params.
func TestSetBrowserProvider(t *testing.T) {
	home := t.TempDir()
	script := filepath.Join(home, "script.json")
	os.WriteFile(script, []byte(`{"steps":[
 {"match":"browse","tool_calls":[{"name":"browser","arguments":{"action":"read"}}]},
 {"after_tool":"browser","text":"Done."}]}`), 0o600)
	d, err := daemon.Start(context.Background(), daemon.Config{Home: home, Provider: "fake:" + script})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	c := helloWS(t, d)
	ctx := context.Background()
	id := createSession(t, c, map[string]any{"mode": "auto"})
	wantCode(t, c.Call(ctx, "session.setBrowserProvider", map[string]any{"sessionId": id, "provider": "docker"}, nil), errcode.InvalidParams, "provider")
	var res map[string]any
	if err := c.Call(ctx, "session.setBrowserProvider", map[string]any{"sessionId": id, "provider": "none"}, &res); err != nil || res["provider"] != "none" {
		t.Fatalf("setBrowserProvider none: %v %v", res, err)
	}
	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "browse"}, nil)
	evs := collect(t, c.Events(id), "turn.done", 1)
	errEvs := findKind(evs, "error")
	if len(errEvs) != 1 || errEvs[0]["code"] != errcode.BrowserProviderUnavailable || !strings.Contains(errEvs[0]["message"].(string), "none") {
		t.Fatalf("error events %v", errEvs)
	}
}

// TestHostBrowser: with the session's browser provider host, the model's
// browser calls go to the browser a WebSocket client lent the session
// (tool.register of a tool named browser), which answers them; before one
// is lent they fail with browser_provider_unavailable and the turn goes on.
func TestHostBrowser(t *testing.T) {
	home := t.TempDir()
	script := filepath.Join(home, "script.json")
	os.WriteFile(script, []byte(`{"steps":[
 {"match":"browse","tool_calls":[{"name":"browser","arguments":{"action":"navigate","url":"https://example.com/"}}]},
 {"after_tool":"browser","text":"Done."}],"repeat":true}`), 0o600)
	d, err := daemon.Start(context.Background(), daemon.Config{Home: home, Provider: "fake:" + script})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	c := helloWS(t, d)
	ctx := context.Background()
	var urls []string
	c.onRequest = func(method string, params json.RawMessage) (any, *errcode.Error) {
		var call struct {
			Name      string         `json:"name"`
			Arguments map[string]any `json:"arguments"`
		}
		json.Unmarshal(params, &call)
		if method != "tool.call" || call.Name != "browser" {
			return nil, errcode.New(errcode.Internal, "unexpected %s %s", method, call.Name)
		}
		urls = append(urls, fmt.Sprint(call.Arguments["url"]))
		return map[string]any{"output": "Example Domain (in the client's own browser)"}, nil
	}
	id := createSession(t, c, map[string]any{"mode": "auto"})
	var res map[string]any
	if err := c.Call(ctx, "session.setBrowserProvider", map[string]any{"sessionId": id, "provider": "host"}, &res); err != nil || res["provider"] != "host" {
		t.Fatalf("setBrowserProvider host: %v %v", res, err)
	}
	evs := promptComplete(t, c, id, "browse")
	if errEvs := findKind(evs, "error"); len(errEvs) != 1 || errEvs[0]["code"] != errcode.BrowserProviderUnavailable || !strings.Contains(errEvs[0]["message"].(string), "lent") {
		t.Fatalf("a browser call with no browser lent: error events %v", errEvs)
	}
	if err := c.Call(ctx, "tool.register", map[string]any{"sessionId": id, "tools": []any{map[string]any{"name": "browser", "description": "The client's browser.", "permission": "network"}}}, nil); err != nil {
		t.Fatalf("lend a browser: %v", err)
	}
	evs = promptComplete(t, c, id, "browse")
	results := findKind(evs, "tool.result")
	if len(results) != 1 || results[0]["ok"] != true || !strings.Contains(fmt.Sprint(results[0]["output"]), "in the client's own browser") {
		t.Fatalf("a browser call with a browser lent: tool.result %v", results)
	}
	if len(urls) != 1 || urls[0] != "https://example.com/" {
		t.Errorf("the lent browser was called with %v", urls)
	}
}
