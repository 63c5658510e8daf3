package session_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/llm/fake"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/toolbox"
)

// skillList is a session.Skills whose commands a test sets.
type skillList struct {
	mu   sync.Mutex
	cmds []session.SkillCommand
}

func (l *skillList) SkillCommands() []session.SkillCommand {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]session.SkillCommand(nil), l.cmds...)
}

func (l *skillList) set(cmds ...session.SkillCommand) {
	l.mu.Lock()
	l.cmds = cmds
	l.mu.Unlock()
}

// newSkillHarness is newHarness with skills.
func newSkillHarness(t *testing.T, skills session.Skills) *harness {
	t.Helper()
	home := t.TempDir()
	st, err := sqlite.Open(filepath.Join(home, "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := fake.Parse([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewBuiltinRegistry(tool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{st: st, log: eventlog.New(st), home: home}
	h.svc, err = session.NewService(context.Background(), session.Deps{
		Store: st, Events: h.log, Providers: providers{fake.New(sc)},
		Toolbox: toolbox.New(reg, filepath.Join(home, "out"), nil, nil),
		Skills:  skills,
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestSkillCommands(t *testing.T) {
	skills := &skillList{}
	skills.set(
		session.SkillCommand{Name: "review", Summary: "Review the change", Prompt: "Say hello, then review the diff."},
		session.SkillCommand{Name: "help", Summary: "A skill the built-in shadows", Prompt: "never"},
		session.SkillCommand{Name: "greet", Summary: "A skill the project command shadows", Prompt: "never"},
	)
	h := newSkillHarness(t, skills)
	defer h.close()
	ctx := context.Background()
	wd := t.TempDir()
	os.MkdirAll(filepath.Join(wd, ".trellis", "commands"), 0o755)
	os.WriteFile(filepath.Join(wd, ".trellis", "commands", "greet.md"), []byte("hello $ARGUMENTS\n"), 0o644)
	id, err := h.svc.Create(ctx, session.CreateParams{Workdir: wd})
	if err != nil {
		t.Fatal(err)
	}

	for _, sid := range []string{"", id} {
		cmds, err := h.svc.Commands(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		sources := map[string][]string{}
		for _, c := range cmds {
			sources[c.Name] = append(sources[c.Name], c.Source)
			if c.Name == "review" && c.Summary != "Review the change" {
				t.Errorf("review summary %q", c.Summary)
			}
		}
		if got := strings.Join(sources["review"], ","); got != "skill" {
			t.Errorf("session %q: /review sources %q, want skill", sid, got)
		}
		if got := strings.Join(sources["help"], ","); got != "builtin" {
			t.Errorf("session %q: /help sources %q, want the built-in only", sid, got)
		}
		wantGreet := "skill"
		if sid != "" {
			wantGreet = "project"
		}
		if got := strings.Join(sources["greet"], ","); got != wantGreet {
			t.Errorf("session %q: /greet sources %q, want %s", sid, got, wantGreet)
		}
	}

	// /review runs a turn whose prompt is the instructions, then the args.
	if _, err := h.svc.Prompt(ctx, id, "/review main.go please", nil, ""); err != nil {
		t.Fatal(err)
	}
	evs := h.waitKind(t, id, 0, "turn.done", 1)
	var started, answer string
	for _, e := range evs {
		switch e.Kind {
		case "turn.started":
			started, _ = payload(t, e)["prompt"].(string)
		case "message.done":
			answer, _ = payload(t, e)["text"].(string)
		}
	}
	last := evs[len(evs)-1]
	if started != "/review main.go please" || !strings.Contains(answer, "Hi there") || payload(t, last)["reason"] != "complete" {
		t.Fatalf("turn.started prompt %q, answer %q, end %v", started, answer, payload(t, last))
	}
	hist, err := h.st.LoadHistory(ctx, id)
	if err != nil || len(hist) == 0 {
		t.Fatalf("history: %d messages, %v", len(hist), err)
	}
	if first := string(hist[0]); !strings.Contains(first, `Say hello, then review the diff.\n\nmain.go please`) {
		t.Fatalf("the model was prompted with %s", first)
	}

	// A skill removed since is no command any more.
	skills.set()
	if _, err := h.svc.RunCommand(ctx, id, "review", "", ""); errs.CodeOf(err) != errcode.NotFound {
		t.Fatalf("RunCommand of a removed skill: %v, want not_found", err)
	}
}
