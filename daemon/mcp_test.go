package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/tool/mcp"
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
	if s, _, err := loadMCPServers(Config{Home: home}); err != nil || len(s) != 0 {
		t.Fatalf("empty home: %v %v", s, err)
	}
	write(home, "mcp.json", `{"mcpServers":{"a":{"command":"home-a"},"b":{"command":"home-b"}}}`)
	flag := write(t.TempDir(), "extra.json", `{"mcpServers":{"b":{"url":"http://127.0.0.1:1/mcp"},"c":{"command":"flag-c"}}}`)
	s, _, err := loadMCPServers(Config{Home: home, MCPConfig: flag})
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
			_, _, err := loadMCPServers(Config{Home: h, MCPConfig: tc.flag})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestAgentMCPServers(t *testing.T) {
	defs := map[string]string{"helper": `{"tools":{"command":"/nonexistent/agent-mcp"}}`, "plain": ""}
	x := newMCPServers(filepath.Join(t.TempDir(), "mcp.json"), "", nil, nil, func(name string) ([]byte, error) { return []byte(defs[name]), nil }, nil, slog.New(slog.DiscardHandler))
	defer x.Close()
	if regs := x.Registries(context.Background(), session.Info{Agent: "plain"}); len(regs) != 0 {
		t.Fatalf("an agent without servers got %d registries", len(regs))
	}
	if regs := x.Registries(context.Background(), session.Info{Agent: "helper"}); len(regs) != 1 {
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

func TestMCPServersEdits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mcp.json")
	extra := mcp.Servers{"fixed": {Command: "/nonexistent/fixed"}}
	x := newMCPServers(path, "flags.json", extra, extra, func(string) ([]byte, error) { return nil, nil }, nil, slog.New(slog.DiscardHandler))
	defer x.Close()
	ctx := context.Background()
	for _, err := range []error{x.Put(ctx, "fixed", mcp.ServerConfig{Command: "/bin/true"}, true), x.Delete(ctx, "fixed")} {
		if errs.CodeOf(err) != errcode.InvalidParams || !strings.Contains(err.Error(), "--mcp-config") {
			t.Fatalf("editing a server of --mcp-config: %v", err)
		}
	}
	if err := x.Put(ctx, "new", mcp.ServerConfig{Command: "/nonexistent/new", Env: map[string]string{"TOKEN": "t"}}, false); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mcp.json: %v %v, want mode 0600", fi, err)
	}
	if saved, err := mcp.Load(path, false); err != nil || saved["new"].Env["TOKEN"] != "t" || len(saved) != 1 {
		t.Fatalf("mcp.json holds %v (%v)", saved, err)
	}
	if err := x.Put(ctx, "new", mcp.ServerConfig{Command: "/nonexistent/new"}, false); errs.CodeOf(err) != errcode.InvalidParams {
		t.Fatalf("adding a name twice without replace: %v", err)
	}
	if st := x.Statuses(); len(st) != 2 || st[0].Name != "fixed" || st[1].Name != "new" {
		t.Fatalf("statuses %+v", st)
	}
	if err := x.Delete(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	if err := x.Delete(ctx, "new"); errs.CodeOf(err) != errcode.NotFound {
		t.Fatalf("deleting it twice: %v", err)
	}
	if st := x.Statuses(); len(st) != 1 {
		t.Fatalf("statuses after delete %+v", st)
	}
}
