package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/client"
)

func newApprovalsCmd(a *app) *cobra.Command {
	cmd := groupCmd("approvals", "approval", "List and answer pending approval requests")
	cmd.AddCommand(newApprovalsLsCmd(a), newApprovalsRespondCmd(a, "allow"), newApprovalsRespondCmd(a, "deny"))
	return cmd
}

func newApprovalsLsCmd(a *app) *cobra.Command {
	var session string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the requests waiting for an answer (the unattended queue)",
		Args:    noArgs(),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, _ []string) error {
			params := map[string]any{}
			if session != "" {
				params["sessionId"] = session
			}
			var r struct {
				Requests []client.ApprovalRequest `json:"requests"`
			}
			if err := c.Call(ctx, "approval.list", params, &r); err != nil {
				return err
			}
			return a.printList(asJSON, r, "REQUEST\tSESSION\tPERMISSION\tRISK\tCALL", func(tw io.Writer) {
				for _, q := range r.Requests {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", q.RequestID, q.SessionID, q.PermissionTag, q.Risk, shorten(describeCall(q.Tool, q.Args), 60))
				}
			})
		}),
	}
	cmd.Flags().StringVar(&session, "session", "", "only the requests of this session")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the approval.list result as JSON")
	return cmd
}

func newApprovalsRespondCmd(a *app, decision string) *cobra.Command {
	var scope, reason string
	cmd := &cobra.Command{
		Use:   decision + " REQUEST",
		Short: map[string]string{"allow": "Allow a pending tool call", "deny": "Deny a pending tool call"}[decision],
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			switch scope {
			case "once", "session", "project", "always":
			default:
				return usageError{fmt.Errorf("--scope %q: want once, session, project or always", scope)}
			}
			c, err := a.connectRunning(ctx, client.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			params := map[string]any{"requestId": args[0], "decision": decision, "scope": scope}
			if reason != "" {
				params["reason"] = reason
			}
			if err := c.Call(ctx, "approval.respond", params, nil); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "trellis: %s: %s\n", args[0], map[string]string{"allow": "allowed", "deny": "denied"}[decision])
			return nil
		},
	}
	cmd.Flags().StringVar(&scope, "scope", "once", "once, or session / project / always to also add an allowlist entry")
	cmd.Flags().StringVar(&reason, "reason", "", "why (the model reads it)")
	return cmd
}
