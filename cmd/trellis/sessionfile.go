package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/client"
)

func newSessionsExportCmd(a *app) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "export SESSION -o FILE",
		Short: "Write a session (events, history, checkpoints) to one portable file",
		Long: `Write a session to one portable file (docs/export.md): its events as stored,
its model history, its checkpoints with their files, and its metadata.
trellis sessions import reads it on any daemon.`,
		Args: argsNamed(1, 1, "a SESSION", `trellis sessions export s-1a2b -o s-1a2b.trellis-session.jsonl`),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			if out == "" {
				return usageError{fmt.Errorf("give the file to write with -o FILE")}
			}
			s, err := findSession(ctx, c, args[0])
			if err != nil {
				return err
			}
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			if err := c.ExportSession(ctx, s.SessionID, f); err != nil {
				_ = f.Close()
				_ = os.Remove(out)
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s exported to %s\n", s.SessionID, out)
			return nil
		}),
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the file to write")
	return cmd
}

func newSessionsImportCmd(a *app) *cobra.Command {
	var newID string
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Create a session from a file trellis sessions export wrote",
		Long: `Create a session from a file trellis sessions export wrote, with its id (or
--id NEW when that id exists here). The whole file is checked first: a damaged
or truncated file is refused and nothing is imported.`,
		Args: argsNamed(1, 1, "a FILE", `trellis sessions import s-1a2b.trellis-session.jsonl`),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			res, err := c.ImportSession(ctx, f, newID)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "imported %s: %d events, %d checkpoints\n", res.SessionID, res.Events, res.Checkpoints)
			return nil
		}),
	}
	cmd.Flags().StringVar(&newID, "id", "", "import under this new session id")
	return cmd
}

func newSessionsArchiveCmd(a *app, method, verb string) *cobra.Command {
	short := "Make a session read-only and list it apart (sessions ls --archived)"
	if method == "session.unarchive" {
		short = "Make an archived session writable again"
	}
	return &cobra.Command{
		Use:   verb + " SESSION",
		Short: short,
		Args:  argsNamed(1, 1, "a SESSION", `trellis sessions `+verb+` s-1a2b`),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			s, err := findSession(ctx, c, args[0])
			if err != nil {
				return err
			}
			if err := c.Call(ctx, method, map[string]any{"sessionId": s.SessionID}, nil); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s %sd\n", s.SessionID, verb)
			return nil
		}),
	}
}
