package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/runtime/session"
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

func TestAgentMCPServers(t *testing.T) {
	defs := map[string]string{"helper": `{"tools":{"command":"/nonexistent/agent-mcp"}}`, "plain": ""}
	x := newMCPServers(nil, func(name string) ([]byte, error) { return []byte(defs[name]), nil }, nil, slog.New(slog.DiscardHandler))
	defer x.Close()
	if regs := x.Registries(context.Background(), session.Info{Agent: "plain"}); len(regs) != 1 {
		t.Fatalf("an agent without servers got %d registries", len(regs))
	}
	if regs := x.Registries(context.Background(), session.Info{Agent: "helper"}); len(regs) != 2 {
		t.Fatalf("an agent with servers got %d registries", len(regs))
	}
	st := x.Statuses()
	if len(st) != 1 || st[0].Name != "tools" || st[0].Scope != "agent:helper" || st[0].State != "failed" || !strings.Contains(st[0].Reason, "/nonexistent/agent-mcp") {
		t.Fatalf("statuses %+v", st)
	}
	// An edited definition replaces the agent's servers.
	defs["helper"] = `{"mcpServers":{"other":{"command":"/nonexistent/other"}}}`
	x.Registries(context.Background(), session.Info{Agent: "helper"})
	if st := x.Statuses(); len(st) != 1 || st[0].Name != "other" {
		t.Fatalf("after the edit: %+v", st)
	}
}
