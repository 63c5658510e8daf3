package facade

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// uiClient drives the console's endpoints over real HTTP.
type uiClient struct {
	t    *testing.T
	base string
}

func (c uiClient) do(method, path, body string, header map[string]string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (c uiClient) code() string {
	c.t.Helper()
	resp, body := c.do("POST", "/ui/login-code", "", map[string]string{"Authorization": "Bearer tok"})
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("login-code: %d %s", resp.StatusCode, body)
	}
	var out struct{ Code, Path string }
	if err := json.Unmarshal([]byte(body), &out); err != nil || out.Code == "" || out.Path != "/ui/#login="+out.Code {
		c.t.Fatalf("login-code answer %s", body)
	}
	return out.Code
}

func TestConsoleLoginExchange(t *testing.T) {
	s := NewServer(Options{Token: "tok"})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	c := uiClient{t: t, base: srv.URL}
	jsonCT := map[string]string{"Content-Type": "application/json"}

	// The page itself, with headers that keep it to itself.
	resp, body := c.do("GET", "/ui/", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Trellis console") {
		t.Fatalf("GET /ui/: %d %.200s", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	if resp, _ := c.do("GET", "/ui/app.js", "", nil); resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "javascript") {
		t.Errorf("GET /ui/app.js: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp, _ := c.do("GET", "/ui/nope.js", "", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /ui/nope.js: %d, want 404", resp.StatusCode)
	}

	// A code needs the token.
	for _, auth := range []string{"", "Bearer nope", "tok"} {
		if resp, _ := c.do("POST", "/ui/login-code", "", map[string]string{"Authorization": auth}); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("login-code with Authorization %q: %d, want 401", auth, resp.StatusCode)
		}
	}

	// Requests that do not come from the console's own page are refused,
	// and a refused request does not use the code up.
	code := c.code()
	refused := []struct {
		name   string
		header map[string]string
		body   string
		want   int
	}{
		{"foreign Origin", map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, `{"code":"` + code + `"}`, http.StatusForbidden},
		{"cross-site fetch", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, `{"code":"` + code + `"}`, http.StatusForbidden},
		{"DNS rebinding (foreign Host)", map[string]string{"Content-Type": "application/json", "Host": "evil.example:80"}, `{"code":"` + code + `"}`, http.StatusForbidden},
		{"not JSON", map[string]string{"Content-Type": "text/plain"}, `{"code":"` + code + `"}`, http.StatusUnsupportedMediaType},
		{"unknown field", jsonCT, `{"code":"` + code + `","x":1}`, http.StatusBadRequest},
		{"no code", jsonCT, `{}`, http.StatusBadRequest},
		{"wrong code", jsonCT, `{"code":"nope"}`, http.StatusUnauthorized},
	}
	for _, r := range refused {
		if resp, body := c.do("POST", "/ui/login", r.body, r.header); resp.StatusCode != r.want {
			t.Errorf("%s: %d %s, want %d", r.name, resp.StatusCode, body, r.want)
		}
	}
	// The wrong-code attempt above consumed nothing but "nope"; this code is
	// still good exactly once.
	resp, body = c.do("POST", "/ui/login", `{"code":"`+code+`"}`, jsonCT)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("login: %d %s", resp.StatusCode, body)
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].Path != "/ui/" {
		t.Fatalf("cookie %+v", cookies)
	}
	if strings.Contains(cookies[0].Value, "tok") {
		t.Errorf("the cookie carries the token: %q", cookies[0].Value)
	}
	if resp, _ := c.do("POST", "/ui/login", `{"code":"`+code+`"}`, jsonCT); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("second use of a code: %d, want 401", resp.StatusCode)
	}

	// The cookie fetches the token; a tampered, absent or foreign one does not.
	good := cookies[0].Name + "=" + cookies[0].Value
	resp, body = c.do("GET", "/ui/token", "", map[string]string{"Cookie": good})
	if resp.StatusCode != http.StatusOK || body != "{\"token\":\"tok\"}\n" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("token: %d %q %q", resp.StatusCode, body, resp.Header.Get("Cache-Control"))
	}
	for name, h := range map[string]map[string]string{
		"no cookie":      nil,
		"tampered":       {"Cookie": good + "x"},
		"foreign Origin": {"Cookie": good, "Origin": "http://evil.example"},
	} {
		if resp, _ := c.do("GET", "/ui/token", "", h); resp.StatusCode == http.StatusOK {
			t.Errorf("token with %s: 200", name)
		}
	}

	// Logout clears the cookie.
	resp, _ = c.do("POST", "/ui/logout", "", map[string]string{"Cookie": good})
	if resp.StatusCode != http.StatusNoContent || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
		t.Errorf("logout: %d %+v", resp.StatusCode, resp.Cookies())
	}
}

func TestConsoleCodeAndCookieExpire(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := &uiLogin{token: "tok", codes: map[string]time.Time{}, now: func() time.Time { return now }}
	v := l.sign(now.Add(time.Minute), "n")
	if !l.verify(v) {
		t.Fatal("a fresh cookie does not verify")
	}
	now = now.Add(2 * time.Minute)
	if l.verify(v) {
		t.Error("an expired cookie verifies")
	}
	other := &uiLogin{token: "another token", now: l.now}
	if other.verify(l.sign(now.Add(time.Hour), "n")) {
		t.Error("a cookie signed under another token verifies")
	}

	rec := httptest.NewRecorder()
	l.newCode(rec, httptest.NewRequest("POST", "/ui/login-code", nil).WithContext(t.Context()))
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("no bearer: %d", rec.Code)
	}
	req := httptest.NewRequest("POST", "/ui/login-code", nil)
	req.Header.Set("Authorization", "Bearer tok")
	rec = httptest.NewRecorder()
	l.newCode(rec, req)
	var out struct{ Code string }
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	now = now.Add(uiCodeTTL + time.Second)
	req = httptest.NewRequest("POST", "http://127.0.0.1:8080/ui/login", strings.NewReader(`{"code":"`+out.Code+`"}`))
	req.Header.Set("Content-Type", "application/json")
	rec = httptest.NewRecorder()
	l.login(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("expired code: %d, want 401", rec.Code)
	}
}

// FuzzConsoleCookie: verify parses any cookie value without panicking and
// accepts only what sign produced.
func FuzzConsoleCookie(f *testing.F) {
	l := &uiLogin{token: "tok", now: func() time.Time { return time.Unix(1_700_000_000, 0) }}
	f.Add(l.sign(time.Unix(1_800_000_000, 0), "nonce"))
	f.Add("1.2.3")
	f.Add("..")
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		ok := l.verify(v)
		if ok && v != l.sign(time.Unix(mustExp(v), 0), v[strings.IndexByte(v, '.')+1:strings.LastIndexByte(v, '.')]) {
			t.Errorf("verify accepted %q, which sign did not produce", v)
		}
	})
}

func mustExp(v string) int64 {
	var n int64
	for _, c := range v[:strings.IndexByte(v, '.')] {
		n = n*10 + int64(c-'0')
	}
	return n
}
