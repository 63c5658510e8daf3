package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/client"
)

func newSessionsCmd(a *app) *cobra.Command {
	cmd := groupCmd("sessions", "session", "List, show, resume, rename, fork, rewind, export, import, archive, delete and prune sessions")
	cmd.AddCommand(newSessionsLsCmd(a), newSessionsShowCmd(a), newSessionsResumeCmd(a), newSessionsRenameCmd(a), newSessionsBudgetCmd(a),
		newSessionsForkCmd(a), newSessionsRewindCmd(a), newSessionsRmCmd(a), newSessionsPruneCmd(a),
		newSessionsExportCmd(a), newSessionsImportCmd(a), newSessionsArchiveCmd(a, "session.archive", "archive"), newSessionsArchiveCmd(a, "session.unarchive", "unarchive"))
	return cmd
}

func newSessionsLsCmd(a *app) *cobra.Command {
	var all, asJSON, archived bool
	var workdir string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sessions, newest first",
		Args:    noArgs(),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, _ []string) error {
			var err error
			if workdir != "" {
				if workdir, err = filepath.Abs(workdir); err != nil {
					return err
				}
			}
			var sessions []client.SessionSummary
			if archived {
				sessions, err = c.ListArchivedSessions(ctx, workdir)
			} else {
				sessions, err = c.ListSessions(ctx, all, workdir)
			}
			if err != nil {
				return err
			}
			return a.printList(asJSON, map[string]any{"sessions": sessions}, "SESSION\tNAME\tSTATUS\tKIND\tLAST ACTIVITY\tWORKDIR\tLAST PROMPT", func(tw io.Writer) {
				for _, s := range sessions {
					last := s.CreatedAt
					if s.LastActivityAt != nil {
						last = *s.LastActivityAt
					}
					status := s.Status
					if s.PendingApprovals > 0 {
						status += fmt.Sprintf(" (%d approvals)", s.PendingApprovals)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.SessionID, shorten(deref(s.Title), 24), status, s.Kind, last, s.Workdir, shorten(deref(s.LastPrompt), 40))
				}
			})
		}),
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "include closed sessions")
	cmd.Flags().BoolVar(&archived, "archived", false, "list the archived sessions only (trellis sessions archive)")
	cmd.Flags().StringVar(&workdir, "workdir", "", "only the sessions of this working directory")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the session.list result as JSON")
	return cmd
}

func newSessionsShowCmd(a *app) *cobra.Command {
	var mode string
	var view viewOptions
	cmd := &cobra.Command{
		Use:   "show SESSION",
		Short: "Print a session's conversation (or its events with --output)",
		Long: `Print a session's conversation, or its stored events with --output. SESSION is
its id, a unique prefix of the id, or its name (trellis sessions rename).`,
		Args: argsNamed(1, 1, "a SESSION", `trellis sessions show s-1a2b (trellis sessions ls lists them)`),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			summary, err := findSession(ctx, c, args[0])
			if err != nil {
				return err
			}
			res, sub, err := c.Resume(ctx, summary.SessionID, 0)
			if err != nil {
				return err
			}
			sub.Close()
			if mode == "" {
				fmt.Fprintf(a.stderr, "session %s · %s · %s · workdir %s\n", summary.SessionID, summary.Status, summary.Mode, summary.Workdir)
				t := newTranscript(a.stdout, a.stdout, colorOK(a.stdoutTTY))
				t.prompts, t.quiet, t.full, t.hint = true, view.quiet, view.full, "--full shows all"
				for _, ev := range res.Events {
					if err := t.event(ev); err != nil {
						return err
					}
				}
				return t.end()
			}
			if mode == modeText {
				return usageError{errors.New("--output text: leave --output out for the conversation")}
			}
			out, err := newOutput(mode, a.stdout, sessionInfoOf(summary))
			if err != nil {
				return err
			}
			for _, ev := range res.Events {
				if err := out.event(ev); err != nil {
					return err
				}
			}
			return out.end()
		}),
	}
	outputFlags(cmd, &mode, "", "print the stored events instead: json, wire or events")
	view.flags(cmd)
	return cmd
}

func newSessionsResumeCmd(a *app) *cobra.Command {
	var approve string
	cmd := &cobra.Command{
		Use:   "resume SESSION",
		Short: "Print a session's conversation and go on chatting in it",
		Long: `Print a session's conversation and go on chatting in it. SESSION is its id, a
unique prefix of the id, or its name (trellis sessions rename).`,
		Args: argsNamed(1, 1, "a SESSION", `trellis sessions resume s-1a2b (trellis sessions ls lists them)`),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.chat(cmd.Context(), chatOptions{session: sessionOptions{session: args[0]}, approve: approve, replay: true})
		},
	}
	cmd.Flags().StringVar(&approve, "approve", "ask", "tool calls that need approval: ask, allow or deny")
	return cmd
}

func newSessionsRenameCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "rename SESSION NAME",
		Short: "Name a session (then --session NAME finds it); an empty NAME clears it",
		Args:  argsNamed(2, 2, "a SESSION and a NAME", `trellis sessions rename s-1a2b "flaky tests"`),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			s, err := findSession(ctx, c, args[0])
			if err != nil {
				return err
			}
			if err := c.Call(ctx, "session.rename", map[string]any{"sessionId": s.SessionID, "title": args[1]}, nil); err != nil {
				return err
			}
			if args[1] == "" {
				fmt.Fprintf(a.stdout, "%s has no name now\n", s.SessionID)
				return nil
			}
			fmt.Fprintf(a.stdout, "%s is named %q\n", s.SessionID, args[1])
			return nil
		}),
	}
}

func newSessionsForkCmd(a *app) *cobra.Command {
	var at int64
	var workdir string
	cmd := &cobra.Command{
		Use:   "fork SESSION --at SEQ",
		Short: "Make a new session from SESSION as it was at event SEQ: its events, model history and files",
		Args:  argsNamed(1, 1, "a SESSION", `trellis sessions fork s-1a2b --at 42`),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			s, err := findSession(ctx, c, args[0])
			if err != nil {
				return err
			}
			params := map[string]any{"sessionId": s.SessionID, "atSeq": at}
			if workdir != "" {
				abs, err := filepath.Abs(workdir)
				if err != nil {
					return err
				}
				params["workdir"] = abs
			}
			var res struct {
				SessionID    string  `json:"sessionId"`
				Workdir      string  `json:"workdir"`
				CheckpointID *string `json:"checkpointId"`
				Messages     int     `json:"messages"`
			}
			if err := c.Call(ctx, "session.fork", params, &res); err != nil {
				return err
			}
			files := "no files (no checkpoint at or before that event)"
			if res.CheckpointID != nil {
				files = "the files of checkpoint " + *res.CheckpointID
			}
			fmt.Fprintf(a.stdout, "%s: a fork of %s at seq %d, with %d messages of history and %s, in %s\n",
				res.SessionID, s.SessionID, at, res.Messages, files, res.Workdir)
			return nil
		}),
	}
	cmd.Flags().Int64Var(&at, "at", 0, "the seq of the last event the fork keeps (required)")
	cmd.Flags().StringVar(&workdir, "workdir", "", "the fork's workdir, empty or missing (default: a new directory beside SESSION's)")
	cmd.PreRunE = needsAt
	return cmd
}

func newSessionsRewindCmd(a *app) *cobra.Command {
	var at int64
	var force bool
	cmd := &cobra.Command{
		Use:   "rewind SESSION --at SEQ",
		Short: "Put an idle SESSION's files and model history back as they were at event SEQ (its log keeps every event)",
		Args:  argsNamed(1, 1, "a SESSION", `trellis sessions rewind s-1a2b --at 42`),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			s, err := findSession(ctx, c, args[0])
			if err != nil {
				return err
			}
			var res struct {
				Seq          int64   `json:"seq"`
				CheckpointID *string `json:"checkpointId"`
				Messages     int     `json:"messages"`
			}
			if err := c.Call(ctx, "session.rewind", map[string]any{"sessionId": s.SessionID, "atSeq": at, "force": force}, &res); err != nil {
				return err
			}
			files := "its files left as they are (no checkpoint at or before that event)"
			if res.CheckpointID != nil {
				files = "the files of checkpoint " + *res.CheckpointID
			}
			fmt.Fprintf(a.stdout, "%s rewound to seq %d: %d messages of history and %s (session.rewound at seq %d)\n",
				s.SessionID, at, res.Messages, files, res.Seq)
			return nil
		}),
	}
	cmd.Flags().Int64Var(&at, "at", 0, "the seq of the event to go back to (required)")
	cmd.Flags().BoolVar(&force, "force", false, "rewind even though files changed outside the session since its latest checkpoint (those changes are lost)")
	cmd.PreRunE = needsAt
	return cmd
}

// needsAt refuses fork and rewind without --at: seq 0 is a meaningful
// point, so a missing flag cannot default to it.
func needsAt(cmd *cobra.Command, _ []string) error {
	if !cmd.Flags().Changed("at") {
		return usageError{fmt.Errorf("%s needs --at SEQ, the seq of an event of the session (trellis sessions show SESSION --output events lists them with their seqs)", cmd.CommandPath()[len("trellis "):])}
	}
	return nil
}

func newSessionsBudgetCmd(a *app) *cobra.Command {
	var cost, tokens int64
	var cmd *cobra.Command
	cmd = &cobra.Command{
		Use:   "budget SESSION",
		Short: "Set a session's budget (cost, tokens); at it a turn pauses until the budget is raised. Neither flag clears it",
		Args:  argsNamed(1, 1, "a SESSION", `trellis sessions budget s-1a2b --cost-micro-usd 500000`),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			s, err := findSession(ctx, c, args[0])
			if err != nil {
				return err
			}
			params := map[string]any{"sessionId": s.SessionID}
			if cmd.Flags().Changed("cost-micro-usd") {
				params["maxCostMicroUsd"] = cost
			}
			if cmd.Flags().Changed("tokens") {
				params["maxTokens"] = tokens
			}
			var r struct {
				Budget struct {
					MaxCostMicroUsd *int64 `json:"maxCostMicroUsd"`
					MaxTokens       *int64 `json:"maxTokens"`
					Source          string `json:"source"`
				} `json:"budget"`
				Spent struct {
					CostMicroUsd int64 `json:"costMicroUsd"`
					Tokens       int64 `json:"tokens"`
				} `json:"spent"`
				Paused bool `json:"paused"`
			}
			if err := c.Call(ctx, "session.setBudget", params, &r); err != nil {
				return err
			}
			var limits []string
			if r.Budget.MaxCostMicroUsd != nil {
				limits = append(limits, "cost "+microUSD(*r.Budget.MaxCostMicroUsd))
			}
			if r.Budget.MaxTokens != nil {
				limits = append(limits, fmt.Sprintf("%d tokens", *r.Budget.MaxTokens))
			}
			budget := "no budget"
			if len(limits) > 0 {
				budget = "budget " + strings.Join(limits, ", ") + " (" + r.Budget.Source + ")"
			}
			state := ""
			if r.Paused {
				state = "; its turn stays paused: the budget is still reached"
			}
			fmt.Fprintf(a.stdout, "%s: %s; spent %s, %d tokens%s\n", s.SessionID, budget, microUSD(r.Spent.CostMicroUsd), r.Spent.Tokens, state)
			return nil
		}),
	}
	cmd.Flags().Int64Var(&cost, "cost-micro-usd", 0, "most the session's model calls may cost, in millionths of a US dollar")
	cmd.Flags().Int64Var(&tokens, "tokens", 0, "most input + output tokens the session's model calls may use")
	return cmd
}

// microUSD shows an amount of micro-US-dollars as dollars.
func microUSD(n int64) string {
	sign := ""
	if n < 0 {
		sign, n = "-", -n
	}
	return fmt.Sprintf("%s$%d.%06d", sign, n/1_000_000, n%1_000_000)
}

func newSessionsRmCmd(a *app) *cobra.Command {
	var all, force bool
	var workdir string
	cmd := &cobra.Command{
		Use:     "rm [SESSION...]",
		Aliases: []string{"delete"},
		Short:   "Delete sessions (closing them first); --all or --workdir select many",
		RunE: func(cmd *cobra.Command, ids []string) error {
			ctx := cmd.Context()
			if (len(ids) > 0) == (all || workdir != "") || (all && workdir != "") {
				return usageError{errors.New("give session ids, or --all, or --workdir DIR")}
			}
			c, err := a.connectRunning(ctx, client.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			if len(ids) == 0 {
				if workdir != "" {
					if workdir, err = filepath.Abs(workdir); err != nil {
						return err
					}
				}
				sessions, err := c.ListSessions(ctx, true, workdir)
				if err != nil {
					return err
				}
				for _, s := range sessions {
					ids = append(ids, s.SessionID)
				}
			}
			return a.eachID(ids, "deleted", "sessions", func(id string) error { return removeSession(ctx, c, id, force) })
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "delete every session")
	cmd.Flags().StringVar(&workdir, "workdir", "", "delete the sessions of this working directory")
	cmd.Flags().BoolVar(&force, "force", false, "also delete sessions whose turn is running (it is interrupted)")
	return cmd
}

// removeSession closes a session (a running one only with force) and
// deletes it.
func removeSession(ctx context.Context, c *client.Client, id string, force bool) error {
	s, err := c.Session(ctx, id)
	if err != nil {
		return err
	}
	if s.Running && !force {
		return errors.New("a turn is running (use --force to interrupt and delete it)")
	}
	if s.Status != "closed" {
		if err := c.Call(ctx, "session.close", map[string]any{"sessionId": id}, nil); err != nil {
			return err
		}
	}
	var r struct {
		Deleted int `json:"deleted"`
	}
	if err := c.Call(ctx, "session.deleteSaved", map[string]any{"sessionId": id}, &r); err != nil {
		return err
	}
	if r.Deleted == 0 {
		return errors.New("the daemon did not delete it (still live?)")
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// shorten cuts s to n runes on one line.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
