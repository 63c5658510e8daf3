package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/store"
)

// MaxTeamSize bounds team.start's n.
const MaxTeamSize = 8

// Team states.
const (
	TeamRunning     = "running"
	TeamDone        = "done"
	TeamFailed      = "failed"
	TeamInterrupted = "interrupted"
)

// Subtask statuses.
const (
	TaskQueued   = "queued"
	TaskRunning  = "running"
	TaskDone     = "done"
	TaskConflict = "conflict"
	TaskMerged   = "merged"
	TaskFailed   = "failed"
)

// team is a task split into subtasks, each run by a sub-agent of the
// team's session; in a git repository each works in its own worktree and
// branch, merged back into the session's workdir when it completes.
type team struct {
	id, sessionID, task, workdir string
	git                          bool

	mu          sync.Mutex // guards state, tasks' fields
	state       string
	tasks       []*teamTask
	interrupted bool

	// gitMu serialises what changes the workdir's repository (worktree
	// add and remove, merges, branch deletion): git locks would fail
	// concurrent ones.
	gitMu sync.Mutex
}

type teamTask struct {
	id, title, status, assignee string
	retries                     int
}

// TeamStatus is a team's state (team.status).
type TeamStatus struct {
	TeamID, State, Task string
	Tasks               []TeamTask
}

// TeamTask is one subtask's state.
type TeamTask struct {
	TaskID, Title, Status, Assignee string
	Retries                         int
}

// StartTeam splits task into up to n subtasks (asking the session's model
// for a JSON list of titles; one subtask, the task, when the answer does
// not parse) and runs each as a sub-agent of the session. It returns once
// the subtasks are queued.
func (s *Service) StartTeam(ctx context.Context, sessionID string, n int, task string) (string, error) {
	if strings.TrimSpace(sessionID) == "" {
		return "", errs.New(errcode.InvalidParams, "sessionId is required: the session the team works for")
	}
	if n < 1 || n > MaxTeamSize {
		return "", errs.New(errcode.InvalidParams, "n must be between 1 and %d (got %d)", MaxTeamSize, n)
	}
	if strings.TrimSpace(task) == "" {
		return "", errs.New(errcode.InvalidParams, "task is required: what the team should do")
	}
	parent, err := s.sessions.Get(ctx, sessionID)
	if err != nil {
		return "", err
	}
	if parent.Row.Closed {
		return "", errs.New(errcode.InvalidParams, "session %s is closed: teams need an open session", sessionID)
	}
	if parent.Row.Kind == store.KindSubagent {
		return "", errs.Wrap(errcode.InvalidParams, ErrNested, "session %s is a sub-agent: sub-agents cannot start teams", sessionID)
	}
	titles := s.split(ctx, parent.Row, n, task)
	t := &team{id: ids.New("tm"), sessionID: sessionID, task: task, workdir: parent.Row.Workdir,
		git: isGitRepo(ctx, parent.Row.Workdir), state: TeamRunning}
	for i, title := range titles {
		t.tasks = append(t.tasks, &teamTask{id: fmt.Sprintf("task-%d", i+1), title: title, status: TaskQueued})
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", errs.New(errcode.Overloaded, "the daemon is shutting down").WithData("retryAfterMs", 1000)
	}
	s.teams = append(s.teams, t)
	s.wg.Add(1)
	s.mu.Unlock()
	for _, tt := range t.tasks {
		s.emitTask(t, tt)
	}
	go s.runTeam(t)
	return t.id, nil
}

// TeamStatus reports a team ("" = the latest started).
func (s *Service) TeamStatus(_ context.Context, teamID string) (TeamStatus, error) {
	s.mu.Lock()
	var t *team
	for i := len(s.teams) - 1; i >= 0; i-- {
		if teamID == "" || s.teams[i].id == teamID {
			t = s.teams[i]
			break
		}
	}
	s.mu.Unlock()
	if t == nil {
		if teamID == "" {
			return TeamStatus{}, errs.Wrap(errcode.NotFound, ErrNotFound, "no team has been started since the daemon started")
		}
		return TeamStatus{}, errs.Wrap(errcode.NotFound, ErrNotFound, "no team %s (teams are kept until the daemon stops)", teamID)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := TeamStatus{TeamID: t.id, State: t.state, Task: t.task}
	for _, tt := range t.tasks {
		out.Tasks = append(out.Tasks, TeamTask{TaskID: tt.id, Title: tt.title, Status: tt.status, Assignee: tt.assignee, Retries: tt.retries})
	}
	return out, nil
}

// split asks the session's model for subtask titles.
func (s *Service) split(ctx context.Context, row store.Session, n int, task string) []string {
	whole := []string{task}
	if n == 1 || s.opts.Providers == nil {
		return whole
	}
	prov, err := s.opts.Providers.Open(row.Provider)
	if err != nil {
		return whole
	}
	stream, err := prov.Stream(ctx, llm.Request{
		Model:  row.Model,
		System: "You plan work for a team of coding agents working in parallel.",
		Messages: []llm.Message{llm.UserText(fmt.Sprintf(
			"Split this task into at most %d independent subtasks that can be done in parallel without touching the same files. "+
				"Answer with only a JSON array of short subtask titles.\n\nTask: %s", n, task))},
	})
	if err != nil {
		s.log.Warn("split a team task", "sessionId", row.SessionID, "err", err)
		return whole
	}
	resp, err := llm.Collect(stream)
	if err != nil {
		s.log.Warn("split a team task", "sessionId", row.SessionID, "err", err)
		return whole
	}
	titles := ParseTitles(resp.Text, n)
	if len(titles) == 0 {
		return whole
	}
	return titles
}

// ParseTitles reads the first JSON array of strings in text, keeping at
// most n non-empty titles; nil when there is none.
func ParseTitles(text string, n int) []string {
	start := strings.IndexByte(text, '[')
	end := strings.LastIndexByte(text, ']')
	if start < 0 || end < start {
		return nil
	}
	var raw []string
	if json.Unmarshal([]byte(text[start:end+1]), &raw) != nil {
		return nil
	}
	var out []string
	for _, r := range raw {
		if r = strings.TrimSpace(r); r != "" && len(out) < n {
			out = append(out, r)
		}
	}
	return out
}

// runTeam runs every subtask, then settles the team's state.
func (s *Service) runTeam(t *team) {
	defer s.wg.Done()
	var wg sync.WaitGroup
	for _, tt := range t.tasks {
		wg.Add(1)
		go func() { defer wg.Done(); s.runTask(t, tt) }()
	}
	wg.Wait()
	t.mu.Lock()
	state := TeamDone
	for _, tt := range t.tasks {
		if tt.status != TaskDone && tt.status != TaskMerged {
			state = TeamFailed
		}
	}
	if t.interrupted {
		state = TeamInterrupted
	}
	t.state = state
	t.mu.Unlock()
	if t.git {
		_ = os.Remove(filepath.Join(s.opts.Home, "worktrees", t.id))
	}
}

// runTask runs one subtask as a sub-agent and merges its branch.
func (s *Service) runTask(t *team, tt *teamTask) {
	ctx := context.Background()
	prompt := t.task
	if len(t.tasks) > 1 {
		prompt = fmt.Sprintf("You are one of %d agents sharing this job:\n%s\n\nYour part: %s\nDo only your part.", len(t.tasks), t.task, tt.title)
	}
	var wt, branch string
	if t.git {
		wt = filepath.Join(s.opts.Home, "worktrees", t.id, tt.id)
		branch = "trellis/" + t.id + "/" + tt.id
		t.gitMu.Lock()
		_, err := git(ctx, t.workdir, "worktree", "add", "-b", branch, wt, "HEAD")
		t.gitMu.Unlock()
		if err != nil {
			s.log.Warn("team worktree", "teamId", t.id, "taskId", tt.id, "err", err)
			s.setTask(t, tt, TaskFailed, "")
			return
		}
		defer func() {
			t.gitMu.Lock()
			defer t.gitMu.Unlock()
			_, _ = git(ctx, t.workdir, "worktree", "remove", "--force", wt)
			t.mu.Lock()
			merged := tt.status == TaskMerged
			t.mu.Unlock()
			if merged { // the branch is history now; unmerged ones are kept
				_, _ = git(ctx, t.workdir, "branch", "-D", branch)
			}
		}()
	}
	c, err := s.spawn(ctx, SpawnParams{Task: prompt, ParentSessionID: t.sessionID, workdir: wt})
	if err != nil {
		s.log.Warn("team sub-agent", "teamId", t.id, "taskId", tt.id, "err", err)
		s.setTask(t, tt, TaskFailed, "")
		return
	}
	s.setTask(t, tt, TaskRunning, c.agentID)
	<-c.done
	res := c.result
	if !res.OK {
		if res.Status == StatusInterrupted {
			t.mu.Lock()
			t.interrupted = true
			t.mu.Unlock()
		}
		s.setTask(t, tt, TaskFailed, c.agentID)
		return
	}
	if !t.git {
		s.setTask(t, tt, TaskDone, c.agentID)
		return
	}
	s.setTask(t, tt, s.merge(ctx, t, tt, wt, branch), c.agentID)
}

// merge commits the worktree's changes on its branch and merges the branch
// into the workdir: merged, conflict (the merge is aborted and the branch
// kept for a person to resolve) or failed.
func (s *Service) merge(ctx context.Context, t *team, tt *teamTask, wt, branch string) string {
	if _, err := git(ctx, wt, "add", "-A"); err != nil {
		s.log.Warn("team commit", "teamId", t.id, "taskId", tt.id, "err", err)
		return TaskFailed
	}
	if _, err := git(ctx, wt, "commit", "--allow-empty", "-m", fmt.Sprintf("trellis team %s %s: %s", t.id, tt.id, tt.title)); err != nil {
		s.log.Warn("team commit", "teamId", t.id, "taskId", tt.id, "err", err)
		return TaskFailed
	}
	t.gitMu.Lock()
	defer t.gitMu.Unlock()
	if _, err := git(ctx, t.workdir, "merge", "--no-ff", "--no-edit", branch); err != nil {
		_, _ = git(ctx, t.workdir, "merge", "--abort")
		s.log.Info("team merge conflict", "teamId", t.id, "taskId", tt.id, "branch", branch, "err", err)
		return TaskConflict
	}
	return TaskMerged
}

// setTask records a subtask's status and emits team.task.update.
func (s *Service) setTask(t *team, tt *teamTask, status, assignee string) {
	t.mu.Lock()
	tt.status = status
	if assignee != "" {
		tt.assignee = assignee
	}
	t.mu.Unlock()
	s.emitTask(t, tt)
}

func (s *Service) emitTask(t *team, tt *teamTask) {
	t.mu.Lock()
	payload := events.TeamTaskUpdateEvent{TeamID: t.id, TaskID: tt.id, Status: tt.status, Retries: tt.retries}
	if a := tt.assignee; a != "" {
		payload.Assignee = &a
	}
	t.mu.Unlock()
	if _, err := s.events.Append(context.Background(), t.sessionID, eventkind.TeamTaskUpdate, payload); err != nil {
		s.log.Warn("report team progress", "sessionId", t.sessionID, "teamId", t.id, "err", err)
	}
}

func isGitRepo(ctx context.Context, dir string) bool {
	out, err := git(ctx, dir, "rev-parse", "--is-inside-work-tree")
	if err != nil || strings.TrimSpace(out) != "true" {
		return false
	}
	// A repository without a commit has no HEAD to branch from.
	_, err = git(ctx, dir, "rev-parse", "--verify", "HEAD")
	return err == nil
}

// git runs git in dir with a fixed identity (commits are the daemon's).
func git(ctx context.Context, dir string, args ...string) (string, error) {
	full := append([]string{"-C", dir, "-c", "user.name=Trellis", "-c", "user.email=trellis@localhost"}, args...)
	cmd := exec.CommandContext(ctx, "git", full...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}
