package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadMCPServers(t *testing.T) {
	write := func(dir, name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	home := t.TempDir()
	// No mcp.json and no flag: no servers.
	if s, err := loadMCPServers(Config{Home: home}); err != nil || len(s) != 0 {
		t.Fatalf("empty home: %v %v", s, err)
	}
	write(home, "mcp.json", `{"mcpServers":{"a":{"command":"home-a"},"b":{"command":"home-b"}}}`)
	flag := write(t.TempDir(), "extra.json", `{"mcpServers":{"b":{"url":"http://127.0.0.1:1/mcp"},"c":{"command":"flag-c"}}}`)
	s, err := loadMCPServers(Config{Home: home, MCPConfig: flag})
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 3 || s["a"].Command != "home-a" || s["b"].URL == "" || s["c"].Command != "flag-c" {
		t.Fatalf("merged: %+v", s)
	}
	tests := []struct{ name, home, flag, want string }{
		{"bad home file", `{"mcpServers":{"x":{}}}`, "", "mcp.json: server x"},
		{"missing flag file", "", "/nonexistent/mcp.json", "--mcp-config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := t.TempDir()
			if tc.home != "" {
				write(h, "mcp.json", tc.home)
			}
			_, err := loadMCPServers(Config{Home: h, MCPConfig: tc.flag})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
