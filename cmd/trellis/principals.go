package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-run/trellis/client"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
)

// protocolJSON is a result as the protocol renders it (for --json).
func protocolJSON(m proto.Message) json.RawMessage { return codec.Marshal(m) }

// limitsText shows a principal's agent or workdir limits ("*" = none).
func limitsText(list []string) string {
	if len(list) == 0 {
		return "*"
	}
	return strings.Join(list, ",")
}

func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// resolvePrincipal turns a principal's name or id into its id.
func resolvePrincipal(ctx context.Context, c *client.Client, nameOrID string) (string, error) {
	r, err := c.Calls().PrincipalList(ctx, nil)
	if err != nil {
		return "", err
	}
	for _, p := range r.GetPrincipals() {
		if p.GetPrincipalId() == nameOrID || p.GetName() == nameOrID {
			return p.GetPrincipalId(), nil
		}
	}
	return "", &exitError{code: exitFailed, msg: fmt.Sprintf("no principal is named %q (trellis principals ls)", nameOrID)}
}

func newPrincipalsCmd(a *app) *cobra.Command {
	cmd := groupCmd("principals", "principal", "Manage who may use the daemon: people and services, each with a role (admins only)")
	ls := listCmd(a, "List principals (the daemon token's built-in admin first)", client.Calls.PrincipalList, "principal.list",
		"ID\tNAME\tKIND\tROLE\tCREATED\tAGENTS\tWORKDIRS", func(tw io.Writer, r *trellisv1.ListPrincipalsResponse) {
			for _, p := range r.GetPrincipals() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.GetPrincipalId(), p.GetName(), p.GetKind(), p.GetRole(), orDash(p.CreatedAt),
					limitsText(p.GetAgents()), limitsText(p.GetWorkdirs()))
			}
		})

	var role, kind string
	var agents, workdirs []string
	create := &cobra.Command{
		Use: "create NAME --role ROLE [--kind service --agent NAME... --workdir PREFIX...]", Short: "Create a principal (then give it a key: trellis keys create NAME)", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if role == "" {
				return usageError{fmt.Errorf("--role is required: admin, operator, member, approver or viewer")}
			}
			ctx := cmd.Context()
			c, err := a.connectRunning(ctx, client.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			r, err := c.Calls().PrincipalCreate(ctx, &trellisv1.CreatePrincipalRequest{
				Name: args[0], Role: role, Kind: &kind, Agents: agents, Workdirs: workdirs,
			})
			if err != nil {
				return err
			}
			printPrincipal(a.stdout, r.GetPrincipal())
			return nil
		},
	}
	create.Flags().StringVar(&role, "role", "", "admin, operator, member, approver or viewer (docs/security.md)")
	create.Flags().StringVar(&kind, "kind", "human", "human or service")
	create.Flags().StringArrayVar(&agents, "agent", nil, "limit a service to this agent (repeatable; \"default\" is the agent of a session made without one)")
	create.Flags().StringArrayVar(&workdirs, "workdir", nil, "limit a service to this absolute workdir and what is below it (repeatable)")

	var newRole, newName string
	var newAgents, newWorkdirs []string
	var clearAgents, clearWorkdirs bool
	update := &cobra.Command{
		Use:   "update NAME|ID [--role ROLE] [--name NEW] [--agent NAME... | --clear-agents] [--workdir PREFIX... | --clear-workdirs]",
		Short: "Change a principal's role, name or a service's limits (--agent and --workdir replace the lists)", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			params := &trellisv1.UpdatePrincipalRequest{
				Agents: newAgents, Workdirs: newWorkdirs, ClearAgents: clearAgents, ClearWorkdirs: clearWorkdirs,
			}
			if cmd.Flags().Changed("role") {
				params.Role = &newRole
			}
			if cmd.Flags().Changed("name") {
				params.Name = &newName
			}
			if (len(newAgents) > 0 && clearAgents) || (len(newWorkdirs) > 0 && clearWorkdirs) {
				return usageError{fmt.Errorf("--agent with --clear-agents, or --workdir with --clear-workdirs: give the new list, or clear it")}
			}
			if params.Role == nil && params.Name == nil && len(newAgents) == 0 && len(newWorkdirs) == 0 && !clearAgents && !clearWorkdirs {
				return usageError{fmt.Errorf("nothing to change: give --role, --name, --agent, --workdir, --clear-agents or --clear-workdirs")}
			}
			ctx := cmd.Context()
			c, err := a.connectRunning(ctx, client.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			id, err := resolvePrincipal(ctx, c, args[0])
			if err != nil {
				return err
			}
			params.PrincipalId = id
			r, err := c.Calls().PrincipalUpdate(ctx, params)
			if err != nil {
				return err
			}
			printPrincipal(a.stdout, r.GetPrincipal())
			return nil
		},
	}
	update.Flags().StringVar(&newRole, "role", "", "the new role")
	update.Flags().StringVar(&newName, "name", "", "the new name")
	update.Flags().StringArrayVar(&newAgents, "agent", nil, "the only agents the service may run (repeatable; replaces the list)")
	update.Flags().StringArrayVar(&newWorkdirs, "workdir", nil, "the only workdirs the service may use, with what is below them (repeatable; replaces the list)")
	update.Flags().BoolVar(&clearAgents, "clear-agents", false, "remove the agent limit")
	update.Flags().BoolVar(&clearWorkdirs, "clear-workdirs", false, "remove the workdir limit")

	rm := &cobra.Command{
		Use: "rm NAME|ID", Aliases: []string{"delete"}, Short: "Delete a principal and its keys", Args: exactArgs(1),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			id, err := resolvePrincipal(ctx, c, args[0])
			if err != nil {
				return err
			}
			if _, err := c.Calls().PrincipalDelete(ctx, &trellisv1.DeletePrincipalRequest{PrincipalId: id}); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "trellis: deleted %s (%s) and its keys\n", args[0], id)
			return nil
		}),
	}
	cmd.AddCommand(ls, create, update, rm, newPrincipalsBudgetCmd(a))
	return cmd
}

func newPrincipalsBudgetCmd(a *app) *cobra.Command {
	var cost, tokens int64
	var cmd *cobra.Command
	cmd = &cobra.Command{
		Use:   "budget NAME|ID",
		Short: "Set a principal's budget (cost, tokens), spent by all its sessions together; at it their turns pause until it is raised. Neither flag clears it",
		Args:  argsNamed(1, 1, "a principal's NAME or ID", `trellis principals budget ann --cost-micro-usd 5000000`),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			id, err := resolvePrincipal(ctx, c, args[0])
			if err != nil {
				return err
			}
			req := &trellisv1.SetPrincipalBudgetRequest{PrincipalId: id}
			if cmd.Flags().Changed("cost-micro-usd") {
				req.MaxCostMicroUsd = &cost
			}
			if cmd.Flags().Changed("tokens") {
				req.MaxTokens = &tokens
			}
			r, err := c.Calls().PrincipalSetBudget(ctx, req)
			if err != nil {
				return err
			}
			var limits []string
			if r.GetBudget().MaxCostMicroUsd != nil {
				limits = append(limits, "cost "+microUSD(r.GetBudget().GetMaxCostMicroUsd()))
			}
			if r.GetBudget().MaxTokens != nil {
				limits = append(limits, fmt.Sprintf("%d tokens", r.GetBudget().GetMaxTokens()))
			}
			budget := "no budget"
			if len(limits) > 0 {
				budget = "budget " + strings.Join(limits, ", ")
			}
			state := ""
			if r.GetReached() {
				state = "; reached: its sessions' turns stay paused"
			}
			fmt.Fprintf(a.stdout, "%s: %s; its sessions spent %s, %d tokens%s\n", id, budget, microUSD(r.GetSpent().GetCostMicroUsd()), r.GetSpent().GetTokens(), state)
			return nil
		}),
	}
	cmd.Flags().Int64Var(&cost, "cost-micro-usd", 0, "most the principal's sessions may cost together, in millionths of a US dollar")
	cmd.Flags().Int64Var(&tokens, "tokens", 0, "most input + output tokens the principal's sessions may use together")
	return cmd
}

// printPrincipal prints what principals create and update answer: id,
// name, kind, role, and a service's limits when it has any.
func printPrincipal(w io.Writer, p *trellisv1.Principal) {
	if len(p.GetAgents()) == 0 && len(p.GetWorkdirs()) == 0 {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", p.GetPrincipalId(), p.GetName(), p.GetKind(), p.GetRole())
		return
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\tagents %s\tworkdirs %s\n", p.GetPrincipalId(), p.GetName(), p.GetKind(), p.GetRole(),
		limitsText(p.GetAgents()), limitsText(p.GetWorkdirs()))
}

func newKeysCmd(a *app) *cobra.Command {
	cmd := groupCmd("keys", "key", "Manage API keys: made for a principal, shown once, revocable (admins only)")
	var asJSON bool
	ls := &cobra.Command{
		Use: "ls [NAME|ID]", Aliases: []string{"list"}, Short: "List keys (never their secrets), of one principal or all", Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			params := &trellisv1.ListKeysRequest{}
			if len(args) == 1 {
				id, err := resolvePrincipal(ctx, c, args[0])
				if err != nil {
					return err
				}
				params.PrincipalId = &id
			}
			r, err := c.Calls().KeyList(ctx, params)
			if err != nil {
				return err
			}
			return a.printList(asJSON, protocolJSON(r), "KEY\tPRINCIPAL\tNAME\tSTARTS\tCREATED\tEXPIRES\tREVOKED", func(tw io.Writer) {
				for _, k := range r.GetKeys() {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s…\t%s\t%s\t%s\n", k.GetKeyId(), k.GetPrincipalId(), k.GetName(), k.GetPrefix(), k.GetCreatedAt(),
						orDash(k.ExpiresAt), orDash(k.RevokedAt))
				}
			})
		}),
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print the key.list result as JSON")

	var name, expires string
	var rate, running int
	create := &cobra.Command{
		Use: "create NAME|ID [--name LABEL] [--expires RFC3339] [--rate N] [--max-running N]", Short: "Make a key for a principal and print it (once)", Args: exactArgs(1),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			id, err := resolvePrincipal(ctx, c, args[0])
			if err != nil {
				return err
			}
			params := &trellisv1.CreateKeyRequest{PrincipalId: id}
			if name != "" {
				params.Name = &name
			}
			if expires != "" {
				params.ExpiresAt = &expires
			}
			if rate != 0 {
				params.RatePerSecond = proto.Int32(int32(min(max(rate, math.MinInt32), math.MaxInt32)))
			}
			if running != 0 {
				params.MaxRunningSessions = proto.Int32(int32(min(max(running, math.MinInt32), math.MaxInt32)))
			}
			r, err := c.Calls().KeyCreate(ctx, params)
			if err != nil {
				return err
			}
			// The secret alone on stdout (for scripts); what it is on stderr.
			fmt.Fprintln(a.stdout, r.GetSecret())
			fmt.Fprintf(a.stderr, "trellis: key %s for %s; it is shown only now (send it as the hello token or Authorization: Bearer)\n", r.GetKey().GetKeyId(), args[0])
			return nil
		}),
	}
	create.Flags().StringVar(&name, "name", "", "a label (the machine or service using the key)")
	create.Flags().StringVar(&expires, "expires", "", "refuse the key after this RFC 3339 time, e.g. 2030-01-02T15:04:05Z")
	create.Flags().IntVar(&rate, "rate", 0, "most calls a second the key may make (default: no limit)")
	create.Flags().IntVar(&running, "max-running", 0, "most sessions the key's prompts may keep running at once (default: no limit)")

	revoke := &cobra.Command{
		Use: "revoke KEY", Short: "Revoke a key: its next call is refused", Args: exactArgs(1),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			r, err := c.Calls().KeyRevoke(ctx, &trellisv1.RevokeKeyRequest{KeyId: strings.TrimSpace(args[0])})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "trellis: revoked %s at %s\n", r.GetKey().GetKeyId(), orDash(r.GetKey().RevokedAt))
			return nil
		}),
	}
	cmd.AddCommand(ls, create, revoke)
	return cmd
}
