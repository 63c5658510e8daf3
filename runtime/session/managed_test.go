package session_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/llm/fake"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/toolbox"
)

const managedScript = `{"steps":[
 {"match":"write","tool_calls":[{"name":"write_file","arguments":{"path":"d/a.txt","content":"alpha\n"}}]},
 {"match":"read","tool_calls":[{"name":"read_file","arguments":{"path":"d/a.txt"}}]},
 {"after_tool":"write_file","text":"Written.","repeat":true},
 {"after_tool":"read_file","text":"Read.","repeat":true},
 {"default":true,"text":"default answer"}
],"repeat":true}`

// machine is a session service with its own managed workspace root on a
// shared store, as a daemon on a machine of its own.
func machine(t *testing.T, st store.Store, log *eventlog.Log, root string) *session.Service {
	t.Helper()
	sc, err := fake.Parse([]byte(managedScript))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewBuiltinRegistry(tool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := session.NewService(context.Background(), session.Deps{
		Store: st, Events: log, Providers: providers{fake.New(sc)},
		Toolbox:     toolbox.New(reg, filepath.Join(t.TempDir(), "out"), nil, nil),
		Log:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		ManagedRoot: root, Checkpoints: session.CheckpointSettings{Enabled: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// TestManagedWorkdirFollowsTheSession: a session created without a
// workdir works in <root>/<id>; another service on the store (another
// daemon) rebuilds the files of its latest checkpoint there before its
// first turn, said by a materialise checkpoint, and only once.
func TestManagedWorkdirFollowsTheSession(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, t.TempDir())
	h.svc.Shutdown(ctx)
	defer func() { h.log.Close(); h.st.Close() }()
	rootA, rootB := t.TempDir(), t.TempDir()
	a := machine(t, h.st, h.log, rootA)
	id, err := a.Create(ctx, session.CreateParams{Mode: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Prompt(ctx, id, "write", nil, ""); err != nil {
		t.Fatal(err)
	}
	evs := h.waitKind(t, id, 0, "turn.done", 1)
	if got, err := os.ReadFile(filepath.Join(rootA, id, "d", "a.txt")); err != nil || string(got) != "alpha\n" {
		t.Fatalf("a.txt on A: %q %v", got, err)
	}
	a.Shutdown(ctx)

	b := machine(t, h.st, h.log, rootB)
	defer b.Shutdown(ctx)
	sum, err := b.Get(ctx, id)
	if err != nil || sum.Row.Workspace != store.WorkspaceManaged || sum.Row.Workdir != filepath.Join(realDir(t, rootB), id) {
		t.Fatalf("on B the session is %+v (%v)", sum.Row, err)
	}
	after := evs[len(evs)-1].Seq
	if _, err := b.Prompt(ctx, id, "read", nil, ""); err != nil {
		t.Fatal(err)
	}
	evs = h.waitKind(t, id, after, "turn.done", 1)
	var materialised, read int
	for _, e := range evs {
		p := payload(t, e)
		switch {
		case e.Kind == "checkpoint" && p["reason"] == "materialise":
			materialised++
		case e.Kind == "tool.result" && p["ok"] == true && strings.Contains(p["output"].(string), "alpha"):
			read++
		}
	}
	if materialised != 1 || read != 1 {
		t.Fatalf("turn on B: %d materialise checkpoints, %d reads of the file, want 1 and 1: %v", materialised, read, kinds(evs))
	}
	after = evs[len(evs)-1].Seq
	if _, err := b.Prompt(ctx, id, "read", nil, ""); err != nil {
		t.Fatal(err)
	}
	for _, e := range h.waitKind(t, id, after, "turn.done", 1) {
		if e.Kind == "checkpoint" {
			t.Fatalf("a second turn on B recorded a checkpoint: %s", e.Payload)
		}
	}
}

// TestUnmanagedWorkdirMissing: a prompt to a session whose named workdir
// is gone is refused with workdir_missing and starts no turn.
func TestUnmanagedWorkdirMissing(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, t.TempDir())
	defer h.close()
	wd := t.TempDir()
	id, err := h.svc.Create(ctx, session.CreateParams{Workdir: wd})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(wd); err != nil {
		t.Fatal(err)
	}
	_, err = h.svc.Prompt(ctx, id, "hello", nil, "")
	var e *errs.Error
	if !errors.As(err, &e) || errs.CodeOf(err) != errcode.WorkdirMissing {
		t.Fatalf("prompt with the workdir gone: %v, want workdir_missing", err)
	}
	if evs, _ := h.st.ReadEvents(ctx, id, 0, 0); len(evs) != 0 {
		t.Fatalf("a refused prompt stored %v", kinds(evs))
	}
}

func realDir(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
