package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/protocol/errcode"
)

// sessionOptions are the flags trellis run and trellis chat share: which
// session the command talks in, and what it sets on that session.
type sessionOptions struct {
	session        string // an id, a unique id prefix or a name (session.rename)
	cont           bool   // the last session used in workdir
	workdir        string // of a new session, and of --continue
	model          string // session.setModel's forms: vendor:model, a model id, a vendor
	agent          string // an agent definition a new session starts from
	permissionMode string // plan, accept or auto
}

// The permission modes of a session (README "Modes").
var permissionModes = []string{"plan", "accept", "auto"}

func (o *sessionOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.session, "session", "", "talk in this session: its id, a unique prefix of the id, or its name (default: a new session)")
	f.BoolVar(&o.cont, "continue", false, "continue the last session used in --workdir")
	f.StringVar(&o.workdir, "workdir", ".", "working directory of a new session, and where --continue looks")
	f.StringVar(&o.model, "model", "", "the session's model: vendor:model (e.g. openai:gpt-4.1), a model id of the daemon's provider, or a vendor (its default model)")
	f.StringVar(&o.agent, "agent", "", "start the new session from this agent definition (its instructions, model and tools)")
	f.StringVar(&o.permissionMode, "permission-mode", "", "what the session asks about: plan, accept or auto (default: accept for a new session; an existing one keeps its own)")
}

// check reports a contradictory or invalid choice before anything runs.
func (o *sessionOptions) check() error {
	if o.session != "" && o.cont {
		return usageError{errors.New("--session and --continue both choose the session: give one of them")}
	}
	if o.agent != "" && (o.session != "" || o.cont) {
		return usageError{errors.New("--agent starts a new session from a definition; an existing session (--session, --continue) keeps its own")}
	}
	if o.permissionMode != "" && !slices.Contains(permissionModes, o.permissionMode) {
		return usageError{fmt.Errorf("--permission-mode %q: want plan, accept or auto", o.permissionMode)}
	}
	return nil
}

// openSession creates the session the options describe, or finds the one
// they name, applies --permission-mode and --model to it, and subscribes to
// its events: from the first one for a new session, from the latest one
// for an existing one.
func (a *app) openSession(ctx context.Context, c *client.Client, o sessionOptions) (sessionInfo, *client.Subscription, error) {
	id, err := a.existingSession(ctx, c, o)
	if err != nil {
		return sessionInfo{}, nil, err
	}
	var sub *client.Subscription
	if id == "" {
		if sub, err = a.newSession(ctx, c, o); err != nil {
			return sessionInfo{}, nil, err
		}
	} else {
		if sub, err = c.Attach(ctx, id); err != nil {
			return sessionInfo{}, nil, err
		}
		if o.permissionMode != "" {
			if err := c.Call(ctx, "session.setMode", map[string]any{"sessionId": id, "mode": o.permissionMode}, nil); err != nil {
				return sessionInfo{}, nil, fmt.Errorf("--permission-mode %s: %w", o.permissionMode, err)
			}
		}
		if o.model != "" {
			if err := setModel(ctx, c, id, o.model); err != nil {
				return sessionInfo{}, nil, err
			}
		}
	}
	summary, err := c.Session(ctx, sub.SessionID())
	if err != nil {
		return sessionInfo{}, nil, err
	}
	return sessionInfoOf(summary), sub, nil
}

// existingSession returns the session --session or --continue chose ("" for
// a new one) and says on stderr which one when it was not given by its id.
func (a *app) existingSession(ctx context.Context, c *client.Client, o sessionOptions) (string, error) {
	switch {
	case o.cont:
		wd, err := workdirOf(o.workdir)
		if err != nil {
			return "", err
		}
		s, err := lastSession(ctx, c, wd)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(a.stderr, "trellis: session %s (continued)\n", s.SessionID)
		return s.SessionID, nil
	case o.session != "":
		s, err := findSession(ctx, c, o.session)
		if err != nil {
			return "", err
		}
		if s.SessionID != o.session {
			fmt.Fprintf(a.stderr, "trellis: session %s\n", s.SessionID)
		}
		return s.SessionID, nil
	}
	return "", nil
}

// newSession creates a session in o.workdir from o's mode, agent and model.
func (a *app) newSession(ctx context.Context, c *client.Client, o sessionOptions) (*client.Subscription, error) {
	wd, err := workdirOf(o.workdir)
	if err != nil {
		return nil, err
	}
	sub, err := c.CreateSession(ctx, client.CreateSessionParams{Workdir: wd, Mode: o.permissionMode, Agent: o.agent})
	if err != nil {
		if o.agent != "" && client.CodeOf(err) == errcode.NotFound {
			return nil, fmt.Errorf("--agent %s: %w", o.agent, err)
		}
		return nil, err
	}
	id := sub.SessionID()
	// session.create takes a model id of one provider; session.setModel
	// also takes vendor:model and a bare vendor, so --model goes there.
	if o.model != "" {
		if err := setModel(ctx, c, id, o.model); err != nil {
			sub.Close()
			// The session never ran a turn: take it away again.
			if rmErr := removeSession(ctx, c, id, false); rmErr != nil {
				fmt.Fprintf(a.stderr, "trellis: session %s: %v\n", id, rmErr)
			}
			return nil, err
		}
	}
	fmt.Fprintf(a.stderr, "trellis: session %s\n", id)
	return sub, nil
}

func setModel(ctx context.Context, c *client.Client, id, model string) error {
	if err := c.Call(ctx, "session.setModel", map[string]any{"sessionId": id, "model": model}, nil); err != nil {
		return fmt.Errorf("--model %s: %w", model, err)
	}
	return nil
}

// workdirOf returns dir as an absolute path, refusing what is not a
// directory.
func workdirOf(dir string) (string, error) {
	wd, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(wd); err != nil || !st.IsDir() {
		return "", usageError{fmt.Errorf("--workdir %s: not a directory", dir)}
	}
	return wd, nil
}

// lastSession returns the chat session of workdir with the latest activity
// (closed ones left out).
func lastSession(ctx context.Context, c *client.Client, workdir string) (client.SessionSummary, error) {
	sessions, err := c.ListSessions(ctx, false, workdir)
	if err != nil {
		return client.SessionSummary{}, err
	}
	var last client.SessionSummary
	var lastAt time.Time
	for _, s := range sessions {
		if s.Kind != "chat" {
			continue // sub-agents and scheduled jobs are not where a person left off
		}
		// The list is newest first: on a tie the newer session wins.
		if at := lastActivity(s); last.SessionID == "" || at.After(lastAt) {
			last, lastAt = s, at
		}
	}
	if last.SessionID == "" {
		return client.SessionSummary{}, &exitError{code: exitFailed, msg: fmt.Sprintf("--continue: no session to continue in %s (run without --continue to start one)", workdir)}
	}
	return last, nil
}

// lastActivity is when a session was last used: its last activity, else
// its creation.
func lastActivity(s client.SessionSummary) time.Time {
	at := s.CreatedAt
	if s.LastActivityAt != nil {
		at = *s.LastActivityAt
	}
	t, _ := time.Parse(time.RFC3339Nano, at)
	return t
}

// maxCandidates is how many sessions an ambiguous --session lists.
const maxCandidates = 10

// findSession finds the session ref names: its id, else its name (the
// title session.rename sets), else a unique prefix of its id. Closed and
// archived sessions count too: they can be shown, exported and unarchived,
// and a prompt to one is refused by the daemon with the reason.
func findSession(ctx context.Context, c *client.Client, ref string) (client.SessionSummary, error) {
	sessions, err := c.ListSessions(ctx, true, "")
	if err != nil {
		return client.SessionSummary{}, err
	}
	archived, err := c.ListArchivedSessions(ctx, "")
	if err != nil {
		return client.SessionSummary{}, err
	}
	sessions = append(sessions, archived...)
	var named, prefixed []client.SessionSummary
	for _, s := range sessions {
		switch {
		case s.SessionID == ref:
			return s, nil
		case deref(s.Title) == ref:
			named = append(named, s)
		case strings.HasPrefix(s.SessionID, ref):
			prefixed = append(prefixed, s)
		}
	}
	switch {
	case len(named) == 1:
		return named[0], nil
	case len(named) > 1:
		return client.SessionSummary{}, ambiguous(fmt.Sprintf("%d sessions are named %q; give the id (or a unique prefix of it) of one", len(named), ref), named)
	case len(prefixed) == 1:
		return prefixed[0], nil
	case len(prefixed) > 1:
		return client.SessionSummary{}, ambiguous(fmt.Sprintf("%d session ids start with %q; give more of the id", len(prefixed), ref), prefixed)
	}
	return client.SessionSummary{}, fmt.Errorf("session %q not found: no session has that id, id prefix or name (trellis sessions ls lists them)", ref)
}

// ambiguous is the usage error of a --session that names several sessions:
// it lists them, the most recently used first.
func ambiguous(what string, candidates []client.SessionSummary) error {
	sort.SliceStable(candidates, func(i, j int) bool { return lastActivity(candidates[i]).After(lastActivity(candidates[j])) })
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", what)
	for i, s := range candidates {
		if i == maxCandidates {
			fmt.Fprintf(&b, "\n  … and %d more (trellis sessions ls lists them)", len(candidates)-maxCandidates)
			break
		}
		fmt.Fprintf(&b, "\n  %s  %s  %s", s.SessionID, s.Workdir, shorten(deref(s.Title), 40))
	}
	return usageError{errors.New(b.String())}
}
