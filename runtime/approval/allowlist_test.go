package approval

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

func TestAllowlistAddValidation(t *testing.T) {
	tests := []struct {
		name, pattern, scope, workdir, session string
		cause                                  error
		wantMsg                                string
	}{
		{"bad pattern", "shell(git", ScopeAlways, "", "", ErrBadPattern, "must end with )"},
		{"empty pattern", "", ScopeAlways, "", "", ErrBadPattern, "tool name is missing"},
		{"unknown scope", "shell", "forever", "/w", "", ErrBadScope, `unknown scope "forever"`},
		{"once is no allowlist scope", "shell", ScopeOnce, "/w", "", ErrBadScope, "not an allowlist scope"},
		{"project without workdir", "shell", ScopeProject, "", "s-1", ErrBadScope, "needs a workdir"},
		{"default scope is project", "shell", "", "", "", ErrBadScope, "needs a workdir"},
		{"session without session id", "shell", ScopeSession, "/w", "", ErrBadScope, "needs a sessionId"},
	}
	a := NewAllowlist(&memStore{}, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.Add(context.Background(), tt.pattern, tt.scope, tt.workdir, tt.session, auth.Principal{})
			wantCode(t, err, errcode.InvalidParams, tt.cause)
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not say %q", err, tt.wantMsg)
			}
		})
	}
}

// allowlistScopes runs against any store: the scopes, dedupe, list and
// remove as a client sees them.
func allowlistScopes(t *testing.T, st store.AllowlistStore) {
	ctx := context.Background()
	a := NewAllowlist(st, nil)
	tick := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	a.now = func() time.Time { tick = tick.Add(time.Second); return tick } // distinct, rising CreatedAt
	ada := auth.Principal{ID: "pr-ada", Name: "ada"}
	must := func(pattern, scope, workdir, session string) string {
		t.Helper()
		id, err := a.Add(ctx, pattern, scope, workdir, session, ada)
		if err != nil {
			t.Fatalf("Add(%s, %s): %v", pattern, scope, err)
		}
		if !strings.HasPrefix(id, "p-") {
			t.Fatalf("pattern id %q, want p-…", id)
		}
		return id
	}
	always := must(" shell(git status*) ", ScopeAlways, "/ignored", "s-ignored")
	project := must("write_file(src/**)", ScopeProject, "/w/proj/", "s-ignored")
	session := must("web_fetch", ScopeSession, "/w/proj", "s-1")
	if again := must("shell(git status*)", ScopeAlways, "", ""); again != always {
		t.Errorf("adding the same entry twice gave ids %s and %s", always, again)
	}

	tests := []struct {
		name, session, workdir, tool, args string
		want                               bool
	}{
		{"always, anywhere", "s-9", "/elsewhere", "shell", `{"command":"git status -s"}`, true},
		{"always, other command", "s-9", "/elsewhere", "shell", `{"command":"git push"}`, false},
		{"project, its workdir", "s-9", "/w/proj", "write_file", `{"path":"src/a/b.go"}`, true},
		{"project, outside its glob", "s-9", "/w/proj", "write_file", `{"path":"docs/a.md"}`, false},
		{"project, another workdir", "s-9", "/w/other", "write_file", `{"path":"src/a.go"}`, false},
		{"session, its session", "s-1", "/anywhere", "web_fetch", `{"url":"https://x"}`, true},
		{"session, another session", "s-2", "/w/proj", "web_fetch", `{"url":"https://x"}`, false},
		{"nothing for this tool", "s-1", "/w/proj", "edit_file", `{"path":"src/a.go"}`, false},
	}
	for _, tt := range tests {
		if got := a.Allowed(ctx, tt.session, tt.workdir, tt.tool, json.RawMessage(tt.args)); got != tt.want {
			t.Errorf("%s: Allowed = %v, want %v", tt.name, got, tt.want)
		}
	}

	lists := []struct {
		scope, workdir string
		want           []string
	}{
		{"", "", []string{always, project, session}},
		{ScopeAlways, "", []string{always}},
		{"", "/w/proj", []string{project, session}},
		{ScopeProject, "/w/proj/.", []string{project}},
	}
	for _, l := range lists {
		entries, err := a.List(ctx, l.scope, l.workdir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.PatternID)
		}
		if strings.Join(got, ",") != strings.Join(l.want, ",") {
			t.Errorf("List(%q, %q) = %v, want %v", l.scope, l.workdir, got, l.want)
		}
	}
	entries, _ := a.List(ctx, ScopeAlways, "")
	if e := entries[0]; e.Pattern != "shell(git status*)" || e.Workdir != "" || e.SessionID != "" || e.CreatedAt.IsZero() ||
		e.PrincipalID != ada.ID || e.PrincipalName != ada.Name {
		t.Errorf("always entry = %+v, want the canonical pattern with no workdir or session, added by %s", e, ada.Name)
	}
	if _, err := a.List(ctx, "forever", ""); !errors.Is(err, ErrBadScope) {
		t.Errorf("List with a bad scope = %v, want ErrBadScope", err)
	}

	if err := a.Remove(ctx, project); err != nil {
		t.Fatal(err)
	}
	if a.Allowed(ctx, "s-9", "/w/proj", "write_file", json.RawMessage(`{"path":"src/a.go"}`)) {
		t.Error("a removed entry still allows")
	}
	err := a.Remove(ctx, project)
	wantCode(t, err, errcode.NotFound, store.ErrNotFound)
	if !strings.Contains(err.Error(), project) {
		t.Errorf("error %q does not name the id", err)
	}
}

func TestAllowlistInMemory(t *testing.T) { allowlistScopes(t, &memStore{}) }

func TestAllowlistSQLite(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	allowlistScopes(t, st)
}

func TestAllowlistRelativeWorkdir(t *testing.T) {
	a := NewAllowlist(&memStore{}, nil)
	ctx := context.Background()
	if _, err := a.Add(ctx, "shell", ScopeProject, ".", "", auth.Principal{}); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(".")
	if !a.Allowed(ctx, "s-1", abs, "shell", json.RawMessage(`{"command":"ls"}`)) {
		t.Error("a project entry added with a relative workdir does not match its absolute form")
	}
}

func TestAllowlistFailsClosed(t *testing.T) {
	st := &memStore{failList: errors.New("disk on fire")}
	a := NewAllowlist(st, nil)
	if a.Allowed(context.Background(), "s-1", "/w", "shell", json.RawMessage(`{"command":"ls"}`)) {
		t.Error("Allowed = true while the store fails, want false")
	}
}
