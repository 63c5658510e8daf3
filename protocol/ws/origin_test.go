package ws_test

import (
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/trellis-run/trellis/protocol/ws"
)

func TestCheckOrigin(t *testing.T) {
	cases := []struct {
		name    string
		host    string
		origin  string
		allowed []string
		ok      bool
	}{
		{"no Origin: a program, not a page", "127.0.0.1:7777", "", nil, true},
		{"loopback page on the same port", "127.0.0.1:7777", "http://127.0.0.1:7777", nil, true},
		{"localhost page, IP host", "127.0.0.1:7777", "http://localhost:7777", nil, true},
		{"IP page, localhost host", "localhost:7777", "http://127.0.0.1:7777", nil, true},
		{"IPv6 loopback", "[::1]:7777", "http://[::1]:7777", nil, true},
		{"other 127/8 address", "127.0.0.1:7777", "http://127.0.0.2:7777", nil, true},
		{"*.localhost", "127.0.0.1:7777", "http://app.localhost:7777", nil, true},
		{"case does not matter", "LOCALHOST:7777", "HTTP://LocalHost:7777", nil, true},
		{"default ports", "localhost", "http://localhost", nil, true},
		{"https default port vs 80", "localhost", "https://localhost", nil, false},
		{"loopback page on another port (another local app)", "127.0.0.1:7777", "http://localhost:3000", nil, false},
		{"remote page", "127.0.0.1:7777", "https://evil.example", nil, false},
		{"DNS rebinding: same origin, non-loopback host", "evil.example:7777", "http://evil.example:7777", nil, false},
		{"loopback origin, non-loopback host", "evil.example:7777", "http://localhost:7777", nil, false},
		{"file page (null)", "127.0.0.1:7777", "null", nil, false},
		{"null explicitly allowed", "127.0.0.1:7777", "null", []string{"null"}, true},
		{"non-http scheme", "127.0.0.1:7777", "chrome-extension://abc", nil, false},
		{"allowed full origin", "127.0.0.1:7777", "https://app.example.com", []string{"https://app.example.com"}, true},
		{"allowed full origin, trailing slash in flag", "127.0.0.1:7777", "https://app.example.com", []string{"https://app.example.com/"}, true},
		{"allowed full origin, wrong scheme", "127.0.0.1:7777", "http://app.example.com", []string{"https://app.example.com"}, false},
		{"allowed host pattern", "127.0.0.1:7777", "https://a.example.com", []string{"*.example.com"}, true},
		{"host pattern does not match port", "127.0.0.1:7777", "https://a.example.com:8443", []string{"*.example.com"}, false},
		{"allowed loopback dev server", "127.0.0.1:7777", "http://localhost:3000", []string{"http://localhost:3000"}, true},
		{"star allows every page", "127.0.0.1:7777", "https://anything.example", []string{"*"}, true},
		{"malformed origin", "127.0.0.1:7777", "http://%zz", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/ws", nil)
			r.Host = tc.host
			if tc.origin != "" {
				r.Header.Set("Origin", tc.origin)
			}
			err := ws.CheckOrigin(r, tc.allowed)
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && !errors.Is(err, ws.ErrOriginRefused) {
				t.Fatalf("got %v, want ErrOriginRefused", err)
			}
		})
	}
}
