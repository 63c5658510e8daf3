package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/internal/duration"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"

	"github.com/trellis-run/trellis/client"
)

// newSessionsPruneCmd is trellis sessions prune: session.prune, printing
// each session it deletes (or would) and why.
func newSessionsPruneCmd(a *app) *cobra.Command {
	var olderThan time.Duration
	var keepLatest int
	var per string
	var dryRun, asJSON bool
	var cmd *cobra.Command
	cmd = &cobra.Command{
		Use:   "prune",
		Short: "Delete the sessions a retention policy keeps none of, with their checkpoints (--dry-run lists them)",
		Long: `Delete the saved sessions that no retention rule keeps: a session is kept when it was active
within --older-than, or when it is among the --keep-latest most recently active of its workdir
(or agent: --per). A rule left out is the daemon's (trellisd --retain, --retain-latest); 0 turns
it off. Archived sessions, running ones and those waiting for an approval are never deleted.
See docs/export.md, "Retention".`,
		Example: `  trellis sessions prune --keep-latest 5 --dry-run
  trellis sessions prune --older-than 30d --keep-latest 5 --per agent`,
		Args: argsNamed(0, 0, "no argument", "trellis sessions prune --keep-latest 5 --dry-run"),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, _ []string) error {
			req := &trellisv1.PruneSessionsRequest{DryRun: &dryRun}
			flags := cmd.Flags().Changed
			if flags("older-than") {
				s := olderThan.String() // Go's form: any daemon reads it
				req.OlderThan = &s
			}
			if flags("keep-latest") {
				n := int32(keepLatest)
				req.KeepLatest = &n
			}
			if flags("per") {
				req.Per = &per
			}
			r, err := c.Calls().SessionPrune(ctx, req)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, protocolJSON(r))
			}
			a.printPruned(r)
			return nil
		}),
	}
	cmd.Flags().Var(duration.Value{D: &olderThan}, "older-than", "keep the sessions active within this long, such as 30d (days), 2w (weeks) or 720h; 0 = no age rule")
	cmd.Flags().IntVar(&keepLatest, "keep-latest", 0, "keep the N most recently active sessions of each group; 0 = no such rule")
	cmd.Flags().StringVar(&per, "per", "workdir", "how --keep-latest groups sessions: workdir or agent")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be deleted; delete nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the session.prune result as JSON")
	return cmd
}

// printPruned prints a session.prune answer: a line per session, then the
// totals and the policy.
func (a *app) printPruned(r *trellisv1.PruneSessionsResponse) {
	verb := "deleted"
	if r.GetDryRun() {
		verb = "would delete"
	}
	would := 0
	for _, s := range r.GetSessions() {
		where := s.GetWorkdir()
		if s.Agent != nil {
			where += ", agent " + s.GetAgent()
		}
		if s.Held != nil {
			fmt.Fprintf(a.stdout, "kept %s (%s, last active %s): %s, although %s\n", s.GetSessionId(), where, s.GetLastActivityAt(), s.GetHeld(), s.GetReason())
			continue
		}
		would++
		fmt.Fprintf(a.stdout, "%s %s (%s, last active %s): %s\n", verb, s.GetSessionId(), where, s.GetLastActivityAt(), s.GetReason())
	}
	var rules []string
	if r.GetOlderThan() != "" {
		rules = append(rules, "keep sessions active within "+r.GetOlderThan())
	}
	if r.GetKeepLatest() > 0 {
		rules = append(rules, fmt.Sprintf("keep the %d latest per %s", r.GetKeepLatest(), r.GetPer()))
	}
	policy := strings.Join(rules, ", or ")
	if r.GetDryRun() {
		fmt.Fprintf(a.stdout, "dry run: %d sessions would be deleted, %s of checkpoints freed (policy: %s)\n", would, humanBytes(r.GetCheckpointBytes()), policy)
		return
	}
	fmt.Fprintf(a.stdout, "%d sessions deleted, %s of checkpoints freed (policy: %s)\n", r.GetDeleted(), humanBytes(r.GetCheckpointBytes()), policy)
}
