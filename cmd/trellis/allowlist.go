package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/client"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// newAllowlistCmd is `trellis allowlist`: the patterns that let tool calls
// run without asking, among them the ones "Always allow" answers added.
func newAllowlistCmd(a *app) *cobra.Command {
	cmd := groupCmd("allowlist", "allowlists", "List, add and remove the patterns that let tool calls run without asking")
	cmd.AddCommand(newAllowlistLsCmd(a), newAllowlistAddCmd(a), newAllowlistRmCmd(a))
	return cmd
}

// checkAllowlistScope refuses a scope the allowlist does not have ("" is
// every scope where empty is allowed).
func checkAllowlistScope(scope string, emptyOK bool) error {
	switch scope {
	case "session", "project", "always":
		return nil
	case "":
		if emptyOK {
			return nil
		}
	}
	return usageError{fmt.Errorf("--scope %q: want session, project or always", scope)}
}

func newAllowlistLsCmd(a *app) *cobra.Command {
	var scope, workdir string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List allowlist patterns, oldest first (never answered again: they allow without asking)",
		Args:    noArgs(),
		PreRunE: func(*cobra.Command, []string) error { return checkAllowlistScope(scope, true) },
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, _ []string) error {
			params := &trellisv1.ListAllowlistPatternsRequest{}
			if scope != "" {
				params.Scope = &scope
			}
			if workdir != "" {
				abs, err := filepath.Abs(workdir)
				if err != nil {
					return err
				}
				params.Workdir = &abs
			}
			r, err := c.Calls().PermissionAllowlistList(ctx, params)
			if err != nil {
				return err
			}
			return a.printList(asJSON, protocolJSON(r), "PATTERN ID\tSCOPE\tPATTERN\tWORKDIR\tCREATED\tADDED BY", func(tw io.Writer) {
				for _, p := range r.GetPatterns() {
					by := "-"
					if p.GetPrincipal() != nil {
						by = p.GetPrincipal().GetName()
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.GetPatternId(), p.GetScope(), p.GetPattern(), orDash(p.Workdir), p.GetCreatedAt(), by)
				}
			})
		}),
	}
	cmd.Flags().StringVar(&scope, "scope", "", "only the patterns of this scope: session, project or always")
	cmd.Flags().StringVar(&workdir, "workdir", "", "only the patterns stored for this working directory")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the permission.allowlist.list result as JSON")
	return cmd
}

func newAllowlistAddCmd(a *app) *cobra.Command {
	var scope, workdir, session string
	cmd := &cobra.Command{
		Use:   "add PATTERN [--scope project|session|always] [--workdir DIR] [--session SESSION]",
		Short: "Allow calls matching PATTERN without asking, e.g. 'shell(git status*)' or 'write_file(src/**)'",
		Long: `Add an allowlist pattern: "tool" or "tool(glob)", e.g. 'shell(git status*)'.

The scope says where it applies: project (the default) in one working directory
(--workdir, else the current one), session in one session (--session), always
everywhere. The pattern id is printed on stdout (trellis allowlist rm takes it).`,
		Args: exactArgs(1),
		PreRunE: func(*cobra.Command, []string) error {
			if err := checkAllowlistScope(scope, false); err != nil {
				return err
			}
			switch {
			case scope == "session" && session == "":
				return usageError{errors.New("--scope session needs --session SESSION")}
			case scope != "session" && session != "":
				return usageError{errors.New("--session is for --scope session")}
			case scope == "always" && workdir != "":
				return usageError{errors.New("--workdir is for --scope project: an always pattern applies in every directory")}
			}
			return nil
		},
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			params := &trellisv1.AddAllowlistPatternRequest{Pattern: args[0], Scope: &scope}
			switch scope {
			case "project":
				if workdir == "" {
					workdir = "."
				}
				abs, err := filepath.Abs(workdir)
				if err != nil {
					return err
				}
				params.Workdir = &abs
			case "session":
				params.SessionId = &session
			}
			r, err := c.Calls().PermissionAllowlistAdd(ctx, params)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, r.GetPatternId())
			where := map[string]string{"project": "in " + params.GetWorkdir(), "session": "in session " + session, "always": "everywhere"}[scope]
			fmt.Fprintf(a.stderr, "trellis: calls matching %s now run without asking %s\n", args[0], where)
			return nil
		}),
	}
	cmd.Flags().StringVar(&scope, "scope", "project", "project, session or always")
	cmd.Flags().StringVar(&workdir, "workdir", "", "the working directory of a project pattern (default: the current one)")
	cmd.Flags().StringVar(&session, "session", "", "the session of a session pattern")
	return cmd
}

func newAllowlistRmCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "rm PATTERN-ID...",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove allowlist patterns: their calls are asked about again",
		Args:    minArgs(1),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, ids []string) error {
			return a.eachID(ids, "removed", "patterns", func(id string) error {
				_, err := c.Calls().PermissionAllowlistRemove(ctx, &trellisv1.RemoveAllowlistPatternRequest{PatternId: id})
				return err
			})
		}),
	}
}
