package agents_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/agents"
	"github.com/trellis-run/trellis/runtime/errs"
)

func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	run := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=T", "-c", "user.email=t@t"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run("init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("add", "README")
	run("commit", "-q", "-m", "init")
	return dir
}

// waitTeam polls team.status until the team is no longer running.
func waitTeam(t *testing.T, h *harness, id string) agents.TeamStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		st, err := h.agents.TeamStatus(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != agents.TeamRunning {
			return st
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("team %s still running", id)
	return agents.TeamStatus{}
}

func statuses(st agents.TeamStatus) []string {
	var out []string
	for _, tt := range st.Tasks {
		out = append(out, tt.Title+"="+tt.Status)
	}
	return out
}

func TestTeamMergesWorktrees(t *testing.T) {
	h := newHarness(t, 0)
	dir := gitRepo(t)
	parent := h.parentIn(t, "auto", dir)
	id, err := h.agents.StartTeam(context.Background(), parent, 2, "tidy job")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(id, "tm-") {
		t.Fatalf("team id %q", id)
	}
	st := waitTeam(t, h, id)
	if st.State != agents.TeamDone || !reflect.DeepEqual(statuses(st), []string{"part one=merged", "part two=merged"}) {
		t.Fatalf("team %+v", st)
	}
	for _, f := range []string{"one.txt", "two.txt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("%s not merged: %v", f, err)
		}
	}
	out, _ := exec.Command("git", "-C", dir, "branch", "--list", "trellis/*").Output()
	if strings.TrimSpace(string(out)) != "" {
		t.Fatalf("merged branches left: %s", out)
	}
	latest, err := h.agents.TeamStatus(context.Background(), "")
	if err != nil || latest.TeamID != id {
		t.Fatalf("latest %+v, %v", latest, err)
	}
	ups := only(h.waitKind(t, parent, eventkind.TeamTaskUpdate, 6), eventkind.TeamTaskUpdate)
	last := payload(t, ups[len(ups)-1])
	if last["teamId"] != id || last["status"] != "merged" || last["retries"] != 0.0 {
		t.Fatalf("last team.task.update %v", last)
	}
}

func TestTeamConflict(t *testing.T) {
	h := newHarness(t, 0)
	dir := gitRepo(t)
	parent := h.parentIn(t, "auto", dir)
	id, err := h.agents.StartTeam(context.Background(), parent, 2, "conflicting job")
	if err != nil {
		t.Fatal(err)
	}
	st := waitTeam(t, h, id)
	got := strings.Join(statuses(st), ",")
	if st.State != agents.TeamFailed || (got != "clash one=merged,clash two=conflict" && got != "clash one=conflict,clash two=merged") {
		t.Fatalf("team %+v", st)
	}
	out, _ := exec.Command("git", "-C", dir, "status", "--porcelain").Output()
	if strings.TrimSpace(string(out)) != "" {
		t.Fatalf("workdir left dirty after the aborted merge: %s", out)
	}
	out, _ = exec.Command("git", "-C", dir, "branch", "--list", "trellis/*").Output()
	if strings.Count(string(out), "trellis/") != 1 {
		t.Fatalf("the conflicting branch should be kept: %q", out)
	}
}

func TestTeamWithoutGitAndFallback(t *testing.T) {
	h := newHarness(t, 0)
	parent := h.parent(t, "auto")
	// The model's answer to "solo job" is not a list: one subtask.
	id, err := h.agents.StartTeam(context.Background(), parent, 3, "solo job")
	if err != nil {
		t.Fatal(err)
	}
	st := waitTeam(t, h, id)
	if st.State != agents.TeamDone || !reflect.DeepEqual(statuses(st), []string{"solo job=done"}) || st.Tasks[0].Assignee == "" {
		t.Fatalf("team %+v", st)
	}
}

func TestTeamRejects(t *testing.T) {
	h := newHarness(t, 0)
	parent := h.parent(t, "auto")
	for _, tc := range []struct {
		name, session string
		n             int
		task, code    string
	}{
		{"no session", "", 2, "x", errcode.InvalidParams},
		{"n zero", parent, 0, "x", errcode.InvalidParams},
		{"n too big", parent, agents.MaxTeamSize + 1, "x", errcode.InvalidParams},
		{"no task", parent, 2, " ", errcode.InvalidParams},
		{"unknown session", "s-nope", 2, "x", errcode.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := h.agents.StartTeam(context.Background(), tc.session, tc.n, tc.task); errs.CodeOf(err) != tc.code {
				t.Fatalf("err %v, want %s", err, tc.code)
			}
		})
	}
	if _, err := h.agents.TeamStatus(context.Background(), ""); !errors.Is(err, agents.ErrNotFound) {
		t.Fatalf("status without teams: %v", err)
	}
}

func TestParseTitles(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want []string
	}{
		{`["a","b"]`, 5, []string{"a", "b"}},
		{"Sure:\n```json\n[\"a\", \" \", \"b\", \"c\"]\n```", 2, []string{"a", "b"}},
		{`no list`, 3, nil},
		{`[1, 2]`, 3, nil},
		{`] [`, 3, nil},
	} {
		if got := agents.ParseTitles(tc.in, tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseTitles(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// Interrupting the session interrupts its team's sub-agents.
func TestTeamInterrupted(t *testing.T) {
	h := newHarness(t, 0)
	parent := h.parent(t, "auto")
	id, err := h.agents.StartTeam(context.Background(), parent, 2, "lazy job")
	if err != nil {
		t.Fatal(err)
	}
	h.waitKind(t, parent, eventkind.SubagentUpdate, 2) // both sub-agents run
	if err := h.sessions.Interrupt(context.Background(), parent); err != nil {
		t.Fatal(err)
	}
	st := waitTeam(t, h, id)
	if st.State != agents.TeamInterrupted || !reflect.DeepEqual(statuses(st), []string{"slow a=failed", "slow b=failed"}) {
		t.Fatalf("team %+v", st)
	}
}
