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

// askedAnyone and askedClient are the ASKED column of trellis approvals
// ls: who may answer a request.
const (
	askedAnyone = "anyone"         // the unattended queue: trellis approvals allow|deny
	askedClient = "session client" // interactive: the client that runs the session
)

// listedRequest is a request of approval.list with includeInteractive.
type listedRequest struct {
	client.ApprovalRequest
	Interactive bool `json:"interactive"`
}

func newApprovalsLsCmd(a *app) *cobra.Command {
	var session string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List every request waiting for an answer: the unattended queue, and those asked of a session's client",
		Long: `List the requests waiting for an answer. ASKED says who may answer:
anyone for the unattended queue (trellis approvals allow|deny REQUEST), or
session client for a request sent to the client that runs the session (an
interactive trellis chat, an editor, the web console), which alone may
answer it.`,
		Args: noArgs(),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, _ []string) error {
			params := map[string]any{"includeInteractive": true}
			if session != "" {
				params["sessionId"] = session
			}
			var r struct {
				Requests []listedRequest `json:"requests"`
			}
			if err := c.Call(ctx, "approval.list", params, &r); err != nil {
				return err
			}
			return a.printList(asJSON, r, "REQUEST\tSESSION\tASKED\tPERMISSION\tRISK\tCALL", func(tw io.Writer) {
				for _, q := range r.Requests {
					asked := askedAnyone
					if q.Interactive {
						asked = askedClient
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", q.RequestID, q.SessionID, asked, q.PermissionTag, q.Risk, shorten(describeCall(q.Tool, q.Args), 60))
				}
			})
		}),
	}
	cmd.Flags().StringVar(&session, "session", "", "only the requests of this session")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the approval.list result (includeInteractive) as JSON")
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
