package mcp

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, doc string
		want      Servers
		errs      []string
	}{
		{"claude desktop stdio", `{"mcpServers":{"fs":{"command":"npx","args":["-y","@modelcontextprotocol/server-filesystem","/tmp"],"env":{"A":"b"}}}}`,
			Servers{"fs": {Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/tmp"}, Env: map[string]string{"A": "b"}}}, nil},
		{"http with headers and unknown keys", `{"mcpServers":{"web":{"url":"https://example.com/mcp","headers":{"Authorization":"Bearer x"},"alwaysAllow":["a"]}}}`,
			Servers{"web": {URL: "https://example.com/mcp", Headers: map[string]string{"Authorization": "Bearer x"}}}, nil},
		{"claude code type", `{"mcpServers":{"w":{"type":"http","url":"http://127.0.0.1:9/mcp"}}}`,
			Servers{"w": {Type: "http", URL: "http://127.0.0.1:9/mcp"}}, nil},
		{"empty", `{"mcpServers":{}}`, Servers{}, nil},
		{"no servers key, empty object", `{}`, Servers{}, nil},
		{"not json", `{`, nil, []string{"not a JSON object"}},
		{"missing mcpServers", `{"fs":{"command":"x"}}`, nil, []string{`no "mcpServers"`}},
		{"bad name", `{"mcpServers":{"a b":{"command":"x"},"a__b":{"command":"x"}}}`, nil, []string{`"a b"`, `"a__b"`}},
		{"every problem at once", `{"mcpServers":{"a":{},"b":{"command":"x","url":"http://h"},"c":{"url":"ftp://h"},"d":{"type":"ws","url":"http://h"}}}`, nil,
			[]string{`server a: a stdio server needs "command"`, "server b: give", `server c: url "ftp://h"`, `server d: type "ws"`}},
		{"wrong field type", `{"mcpServers":{"a":{"command":["x"]}}}`, nil, []string{"server a:"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.doc))
			if len(tc.errs) > 0 {
				if err == nil {
					t.Fatalf("no error; got %+v", got)
				}
				for _, e := range tc.errs {
					if !strings.Contains(err.Error(), e) {
						t.Errorf("error %q lacks %q", err, e)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v want %+v", got, tc.want)
			}
			for n, w := range tc.want {
				g := got[n]
				if g.Command != w.Command || g.URL != w.URL || strings.Join(g.Args, " ") != strings.Join(w.Args, " ") || len(g.Env) != len(w.Env) || len(g.Headers) != len(w.Headers) {
					t.Fatalf("%s: got %+v want %+v", n, g, w)
				}
			}
		})
	}
}

func TestToolName(t *testing.T) {
	tests := []struct{ server, remote, want string }{
		{"fs", "read_file", "mcp__fs__read_file"},
		{"gh", "issues.list", "mcp__gh__issues_list"},
		{"s", strings.Repeat("x", 80), "mcp__s__" + strings.Repeat("x", 56)},
	}
	for _, tc := range tests {
		if got := ToolName(tc.server, tc.remote); got != tc.want {
			t.Errorf("ToolName(%q, %q) = %q, want %q", tc.server, tc.remote, got, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"mcpServers":{"fs":{"command":"npx","args":["-y"]}}}`))
	f.Add([]byte(`{"mcpServers":{"w":{"url":"http://h/mcp","headers":{"a":"b"}}}}`))
	f.Add([]byte(`{"mcpServers":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			return
		}
		for name, c := range s {
			if ValidName(name) != nil || c.Validate() != nil {
				t.Fatalf("Parse accepted an invalid server %q: %+v", name, c)
			}
			if n := ToolName(name, "t"); len(n) > maxToolName {
				t.Fatalf("tool name %q too long", n)
			}
		}
	})
}
