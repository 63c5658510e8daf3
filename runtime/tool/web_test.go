package tool

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

func TestWebFetch(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("hello from " + r.Header.Get("User-Agent")))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"data":"` + strings.Repeat("a", 5000) + `"}`))
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such page", http.StatusNotFound)
	})
	mux.HandleFunc("/png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"))
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/hello", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	mux.HandleFunc("/to-file", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	u := srv.URL

	runToolCases(t, "web_fetch", []toolCase{
		{name: "text", args: `{"url":"` + u + `/hello"}`, ok: true,
			want: []string{"Status: 200 OK", "Content-Type: text/plain", "\n\nhello from trellis-web-fetch/1"}},
		{name: "size limit", args: `{"url":"` + u + `/big","maxBytes":1000}`, ok: true,
			check: func(t *testing.T, _ fixture, r Result) {
				body := r.Output[strings.Index(r.Output, "\n\n")+2:]
				if !strings.HasPrefix(body, `{"data":"aaa`) || !strings.HasSuffix(body, "\n[body cut at 1000 bytes; it is longer]") ||
					len(body) != 1000+len("\n[body cut at 1000 bytes; it is longer]") {
					t.Errorf("body of %d bytes: %q", len(body), body[len(body)-60:])
				}
			}},
		{name: "under the limit", args: `{"url":"` + u + `/big"}`, ok: true,
			check: func(t *testing.T, _ fixture, r Result) {
				if strings.Contains(r.Output, "body cut") || !strings.HasSuffix(r.Output, `"}`) {
					t.Errorf("output tail %q", r.Output[len(r.Output)-40:])
				}
			}},
		{name: "non-2xx is a failed result with the body", args: `{"url":"` + u + `/missing"}`,
			want: []string{"HTTP 404 Not Found from " + u + "/missing"},
			check: func(t *testing.T, _ fixture, r Result) {
				if !strings.Contains(r.Output, "no such page") {
					t.Errorf("output %q", r.Output)
				}
			}},
		{name: "binary is described", args: `{"url":"` + u + `/png"}`, ok: true,
			want: []string{"[binary content (image/png, 16 bytes) not shown]"}},
		{name: "redirect followed", args: `{"url":"` + u + `/moved"}`, ok: true, want: []string{"URL: " + u + "/hello", "hello from"}},
		{name: "redirect loop", args: `{"url":"` + u + `/loop"}`, want: []string{"stopped after 5 redirects"}},
		{name: "redirect to file:", args: `{"url":"` + u + `/to-file"}`, want: []string{"redirect to a file URL refused"}},
		{name: "file URL", args: `{"url":"file:///etc/passwd"}`, want: []string{"http and https URLs only"}},
		{name: "no host", args: `{"url":"http:///x"}`, want: []string{"has no host"}},
		{name: "unreachable", args: `{"url":"http://127.0.0.1:1/"}`, want: []string{"fetching http://127.0.0.1:1/ failed"}},
		{name: "maxBytes too large", args: `{"url":"` + u + `","maxBytes":2000000}`, code: errcode.InvalidParams, want: []string{"maxBytes"}},
		{name: "no url", args: `{}`, code: errcode.InvalidParams, want: []string{"url"}},
	})
}

type fakeSearch struct{ hits []SearchHit }

func (f fakeSearch) Search(_ context.Context, query string, limit int) ([]SearchHit, error) {
	if query == "fail" {
		return nil, errors.New("quota exceeded")
	}
	return f.hits[:min(limit, len(f.hits))], nil
}

func TestWebSearch(t *testing.T) {
	r := newTestRegistry(t)
	wd := t.TempDir()
	call := Call{Args: json.RawMessage(`{"query":"go generics"}`), Workdir: wd}

	// Unconfigured: inactive, with the protocol's code, in List, Validate and Run.
	err := r.Validate("web_search", call.Args)
	if errs.CodeOf(err) != errcode.SearchProviderUnavailable || !errors.Is(err, ErrInactive) {
		t.Fatalf("Validate = %v (code %q), want search_provider_unavailable", err, errs.CodeOf(err))
	}
	if _, err := r.Run(context.Background(), "web_search", call); errs.CodeOf(err) != errcode.SearchProviderUnavailable {
		t.Fatalf("Run = %v, want search_provider_unavailable", err)
	}
	info := findInfo(t, r, "web_search")
	if info.State != "inactive" || !strings.Contains(info.Reason, "no search provider is configured") {
		t.Errorf("info %+v", info)
	}

	tl, _ := r.Lookup("web_search")
	tl.(*WebSearch).SetProvider(fakeSearch{hits: []SearchHit{
		{Title: "Generics", URL: "https://go.dev/doc/tutorial/generics", Snippet: "A tutorial"},
		{Title: "Spec", URL: "https://go.dev/ref/spec"},
	}})
	if info := findInfo(t, r, "web_search"); info.State != "active" || info.Reason != "" {
		t.Errorf("after SetProvider: %+v", info)
	}
	res, err := r.Run(context.Background(), "web_search", call)
	if err != nil || !res.OK || res.Output != "1. Generics\n   https://go.dev/doc/tutorial/generics\n   A tutorial\n2. Spec\n   https://go.dev/ref/spec" {
		t.Errorf("Run = %+v, %v", res, err)
	}
	res, err = r.Run(context.Background(), "web_search", Call{Args: json.RawMessage(`{"query":"fail"}`), Workdir: wd})
	if err != nil || res.OK || !strings.Contains(res.Error, "quota exceeded") {
		t.Errorf("failing provider: %+v, %v", res, err)
	}
}

func findInfo(t *testing.T, r *Registry, name string) Info {
	t.Helper()
	for _, i := range r.List() {
		if i.Name == name {
			return i
		}
	}
	t.Fatalf("%s not listed", name)
	return Info{}
}

func TestWebFetchRefusesPrivateAddresses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("internal")) }))
	defer srv.Close()
	guarded := NewWebFetch(nil)
	tests := []struct{ name, url string }{
		{"loopback test server", srv.URL},
		{"loopback name", strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)},
		{"link-local metadata", "http://169.254.169.254/latest/meta-data/"},
		{"private", "http://10.0.0.1:1/"},
		{"ipv6 loopback", "http://[::1]:1/"},
		{"unspecified", "http://0.0.0.0:1/"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := guarded.Run(context.Background(), Call{Args: json.RawMessage(`{"url":"` + tc.url + `"}`), Workdir: "/"})
			if err != nil {
				t.Fatal(err)
			}
			if res.OK || !strings.Contains(res.Output, "loopback, private or link-local") || strings.Contains(res.Output, "internal") {
				t.Fatalf("%s: %+v", tc.url, res)
			}
		})
	}
	allowed := NewWebFetchWith(WebFetchOptions{AllowPrivate: true})
	res, err := allowed.Run(context.Background(), Call{Args: json.RawMessage(`{"url":"` + srv.URL + `"}`), Workdir: "/"})
	if err != nil || !res.OK || !strings.HasSuffix(res.Output, "internal") {
		t.Fatalf("allowed: %+v %v", res, err)
	}
}
