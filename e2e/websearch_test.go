package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/daemon"
)

func TestWebSearchSearXNG(t *testing.T) {
	var asked string
	// A local server speaking SearXNG's /search?format=json answer.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/search" || r.URL.Query().Get("format") != "json" {
			http.Error(w, "Forbidden", http.StatusForbidden)
			return
		}
		asked = r.URL.Query().Get("q")
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"query":"` + asked + `","number_of_results":0,"results":[
 {"url":"https://low.example/","title":"Low","content":"ranked last","engine":"bing","engines":["bing"],"positions":[5],"score":0.3,"category":"general"},
 {"url":"https://top.example/","title":"Top","content":"ranked first","engine":"duckduckgo","engines":["duckduckgo","brave"],"positions":[1,1],"score":6.0,"category":"general"},
 {"url":"https://mid.example/","title":"Mid","content":"ranked second","engine":"brave","engines":["brave"],"positions":[2],"score":2.0,"category":"general"}
],"answers":[],"corrections":[],"infoboxes":[],"suggestions":[],"unresponsive_engines":[]}`))
	}))
	defer srv.Close()
	home := t.TempDir()
	script := filepath.Join(home, "script.json")
	os.WriteFile(script, []byte(`{"steps":[
 {"match":"search","tool_calls":[{"name":"web_search","arguments":{"query":"trellis agent runtime"}}]},
 {"after_tool":"web_search","text":"Searched."}],"repeat":true}`), 0o600)
	d, err := daemon.Start(context.Background(), daemon.Config{Home: home, Provider: "fake:" + script, SearchProvider: "searxng=" + srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	c := helloWS(t, d)
	a := &approver{reply: map[string]any{"decision": "allow"}}
	c.onRequest = a.handle
	id := createSession(t, c, map[string]any{"mode": "accept"})
	c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": "search the web"}, nil)
	evs := collect(t, c.Events(id), "turn.done", 1)
	res := findKind(evs, "tool.result")
	if len(res) != 1 || res[0]["ok"] != true {
		t.Fatalf("web_search result %v (events %v)", res, eventKinds(evs))
	}
	out := res[0]["output"].(string)
	top, mid, low := strings.Index(out, "1. Top\n   https://top.example/"), strings.Index(out, "2. Mid"), strings.Index(out, "3. Low")
	if top < 0 || mid < top || low < mid || !strings.Contains(out, "ranked first") || asked != "trellis agent runtime" {
		t.Fatalf("ranked output:\n%s\n(query %q)", out, asked)
	}
	if a.count() != 1 || a.asked[0]["permissionTag"] != "network" {
		t.Fatalf("approvals %v", a.asked)
	}
}
