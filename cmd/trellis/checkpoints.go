package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/client"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// newCheckpointsCmd is `trellis checkpoints`: the recorded states of a
// session's workdir (docs/workspaces.md).
func newCheckpointsCmd(a *app) *cobra.Command {
	cmd := groupCmd("checkpoints", "checkpoint", "List, diff, restore and delete the checkpoints of a session's workdir")
	cmd.AddCommand(newCheckpointsLsCmd(a), newCheckpointsDiffCmd(a), newCheckpointsRestoreCmd(a), newCheckpointsRmCmd(a))
	return cmd
}

// sessionID resolves ref (an id, a unique id prefix or a name) to a
// session id.
func sessionID(ctx context.Context, c *client.Client, ref string) (string, error) {
	s, err := findSession(ctx, c, ref)
	if err != nil {
		return "", err
	}
	return s.SessionID, nil
}

func newCheckpointsLsCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls SESSION",
		Aliases: []string{"list"},
		Short:   "List a session's checkpoints, oldest first, with what each did not record (skipped)",
		Args:    exactArgs(1),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			id, err := sessionID(ctx, c, args[0])
			if err != nil {
				return err
			}
			r, err := c.Calls().CheckpointList(ctx, &trellisv1.ListCheckpointsRequest{SessionId: id})
			if err != nil {
				return err
			}
			return a.printList(asJSON, protocolJSON(r), "CHECKPOINT ID\tSEQ\tREASON\tTOOL\tFILES\tBYTES\tSKIPPED\tCREATED", func(tw io.Writer) {
				for _, k := range r.GetCheckpoints() {
					parts := make([]string, 0, len(k.GetSkipped()))
					for _, s := range k.GetSkipped() {
						parts = append(parts, s.GetPath()+" ("+s.GetReason()+")")
					}
					skipped := strings.Join(parts, ", ")
					fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\n", k.GetCheckpointId(), k.GetSeq(), k.GetReason(), orDash(k.Tool),
						k.GetFiles(), k.GetBytes(), orDash(&skipped), k.GetCreatedAt())
				}
			})
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the checkpoint.list result as JSON")
	return cmd
}

func newCheckpointsDiffCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "diff SESSION FROM [TO]",
		Short: "Show what changed between two checkpoints, or from one to the workdir's current files, as a unified diff",
		Args:  argsNamed(2, 3, "SESSION and FROM (TO is optional)", ""),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			id, err := sessionID(ctx, c, args[0])
			if err != nil {
				return err
			}
			req := &trellisv1.DiffCheckpointsRequest{SessionId: id, From: args[1]}
			if len(args) == 3 {
				req.To = &args[2]
			}
			r, err := c.Calls().CheckpointDiff(ctx, req)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, protocolJSON(r))
			}
			fmt.Fprint(a.stdout, r.GetDiff())
			if r.GetTruncated() {
				fmt.Fprintln(a.stderr, "trellis: the diff was cut at the daemon's limit; --json lists every changed path")
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the checkpoint.diff result as JSON (the diff and every changed path)")
	return cmd
}

func newCheckpointsRestoreCmd(a *app) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "restore SESSION CHECKPOINT",
		Short: "Put the session's workdir back as the checkpoint recorded it (refused if files changed outside Trellis, unless --force)",
		Args:  exactArgs(2),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			id, err := sessionID(ctx, c, args[0])
			if err != nil {
				return err
			}
			r, err := c.Calls().CheckpointRestore(ctx, &trellisv1.RestoreCheckpointRequest{SessionId: id, CheckpointId: args[1], Force: force})
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, r.GetCheckpointId())
			fmt.Fprintf(a.stderr, "trellis: restored %s: %d written, %d removed (the new checkpoint's id is on stdout)\n", args[1], r.GetWritten(), r.GetRemoved())
			return nil
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "restore even over files changed outside Trellis since the last checkpoint")
	return cmd
}

func newCheckpointsRmCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "rm SESSION CHECKPOINT...",
		Aliases: []string{"remove", "delete"},
		Short:   "Delete checkpoints of a session (and the stored contents no other checkpoint of it keeps)",
		Args:    minArgs(2),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			id, err := sessionID(ctx, c, args[0])
			if err != nil {
				return err
			}
			return a.eachID(args[1:], "deleted", "checkpoints", func(cid string) error {
				_, err := c.Calls().CheckpointDelete(ctx, &trellisv1.DeleteCheckpointRequest{SessionId: id, CheckpointId: cid})
				return err
			})
		}),
	}
}
