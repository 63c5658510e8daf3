package websearch

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/runtime/tool"
)

// searxngAnswer is shaped like SearXNG's /search?format=json answer.
const searxngAnswer = `{"query":"trellis","number_of_results":0,"results":[
 {"url":"https://b.example/second","title":"Second","content":"the second best","engine":"bing","parsed_url":["https","b.example","/second","","",""],"engines":["bing"],"positions":[2],"score":1.5,"category":"general"},
 {"url":"https://a.example/first","title":"First","content":"the best match","engine":"duckduckgo","engines":["duckduckgo","bing"],"positions":[1,1],"score":4.0,"category":"general"},
 {"url":"https://c.example/third","title":"Third","content":"","engine":"brave","engines":["brave"],"positions":[3],"score":0.5,"category":"general"}
],"answers":[],"corrections":[],"infoboxes":[],"suggestions":["trellis garden"],"unresponsive_engines":[]}`

// braveAnswer is shaped like the Brave Search API's web search answer.
const braveAnswer = `{"type":"search","query":{"original":"trellis","more_results_available":true},
 "mixed":{"type":"mixed","main":[{"type":"web","index":0,"all":false}]},
 "web":{"type":"search","results":[
  {"title":"Trellis - a garden frame","url":"https://a.example/","is_source_local":false,"description":"A <strong>trellis</strong> supports plants.","page_age":"2024-01-01T00:00:00","profile":{"name":"A"},"language":"en","family_friendly":true,"type":"search_result"},
  {"title":"Trellis runtime","url":"https://b.example/","description":"Agents on a <strong>trellis</strong>.","type":"search_result"}
 ],"family_friendly":true}}`

func TestProviders(t *testing.T) {
	var gotQuery, gotKey string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotQuery, gotKey = r.URL.RawQuery, r.Header.Get("X-Subscription-Token")
		switch r.URL.Path {
		case "/searxng/search":
			if r.URL.Query().Get("format") != "json" {
				http.Error(w, "format", http.StatusForbidden)
				return
			}
			w.Write([]byte(searxngAnswer))
		case "/brave":
			if gotKey != "k-123" {
				http.Error(w, `{"type":"ErrorResponse","error":{"code":"SUBSCRIPTION_TOKEN_INVALID"}}`, http.StatusUnauthorized)
				return
			}
			w.Write([]byte(braveAnswer))
		case "/html/search":
			w.Write([]byte("<html>not json</html>"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	tests := []struct {
		name  string
		cfg   Config
		limit int
		want  []string // URLs in order
		err   string
	}{
		{"searxng ranks by score", Config{Kind: "searxng", BaseURL: srv.URL + "/searxng/"}, 8, []string{"https://a.example/first", "https://b.example/second", "https://c.example/third"}, ""},
		{"searxng limit", Config{Kind: "searxng", BaseURL: srv.URL + "/searxng"}, 1, []string{"https://a.example/first"}, ""},
		{"searxng without json format", Config{Kind: "searxng", BaseURL: srv.URL + "/html"}, 8, nil, "is format json enabled"},
		{"brave", Config{Kind: "brave", APIKey: "k-123", BaseURL: srv.URL + "/brave"}, 8, []string{"https://a.example/", "https://b.example/"}, ""},
		{"brave bad key", Config{Kind: "brave", APIKey: "wrong", BaseURL: srv.URL + "/brave"}, 8, nil, "401 Unauthorized"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			hits, err := p.Search(context.Background(), "trellis garden", tc.limit)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "wrong") {
					t.Fatal("the error shows the key")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var urls []string
			for _, h := range hits {
				urls = append(urls, h.URL)
			}
			if strings.Join(urls, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("urls %v, want %v", urls, tc.want)
			}
			if !strings.Contains(gotQuery, "q=trellis+garden") {
				t.Fatalf("query %q", gotQuery)
			}
			if tc.cfg.Kind == "brave" && hits[0].Snippet != "A trellis supports plants." {
				t.Fatalf("brave snippet %q", hits[0].Snippet)
			}
		})
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for _, c := range []Config{{Kind: "searxng"}, {Kind: "searxng", BaseURL: "ftp://x"}, {Kind: "brave"}, {Kind: "bing"}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(searxngAnswer))
	f.Add([]byte(braveAnswer))
	f.Add([]byte(`{"results":[{"url":"x","score":"high"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, parse := range []func([]byte, int) ([]tool.SearchHit, error){parseSearXNG, parseBrave} {
			hits, err := parse(body, 3)
			if err == nil && len(hits) > 3 {
				t.Fatalf("%d hits over the limit", len(hits))
			}
			for _, h := range hits {
				if h.URL == "" {
					t.Fatal("a hit without a URL")
				}
			}
		}
		_ = stripTags(string(body))
	})
}
