package sshbackend

import (
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name string
		in   map[string]any
		port int
		errs []string
	}{
		{"defaults", map[string]any{"host": "h", "user": "u", "workdir": "/srv/w/"}, 22, nil},
		{"port", map[string]any{"host": "h", "user": "u", "workdir": "/w", "port": 2222}, 2222, nil},
		{"every problem", map[string]any{"port": 70000, "workdir": "rel"}, 0, []string{"host is required", "user is required", "port 70000", `workdir "rel"`}},
		{"unknown field", map[string]any{"host": "h", "user": "u", "workdir": "/w", "password": "x"}, 0, []string{`unknown field "password"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(tc.in)
			if len(tc.errs) > 0 {
				for _, e := range tc.errs {
					if err == nil || !strings.Contains(err.Error(), e) {
						t.Fatalf("error %v lacks %q", err, e)
					}
				}
				return
			}
			if err != nil || c.Port != tc.port || c.Kind != "ssh" || strings.HasSuffix(c.Workdir, "/") {
				t.Fatalf("%+v %v", c, err)
			}
		})
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add("h", "u", "/w", 22)
	f.Fuzz(func(t *testing.T, host, user, workdir string, port int) {
		c, err := ParseConfig(map[string]any{"host": host, "user": user, "workdir": workdir, "port": port})
		if err == nil && (c.Host == "" || c.User == "" || c.Port < 1 || c.Port > 65535 || !strings.HasPrefix(c.Workdir, "/")) {
			t.Fatalf("accepted %+v", c)
		}
	})
}
