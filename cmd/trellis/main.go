// Command trellis is the Trellis command-line client: it runs one prompt
// (trellis run) or a conversation (trellis chat) against the daemon of a
// home directory, starting that daemon in the background when none answers,
// and manages sessions, approvals and the daemon itself. `trellis daemon`
// runs the daemon in the foreground, the same code cmd/trellisd runs.
//
// stdout carries only the requested output; every diagnostic goes to stderr.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/version"
)

// Exit statuses.
const (
	exitOK          = 0
	exitFailed      = 1   // an error, or a turn that did not complete
	exitUsage       = 2   // bad command line
	exitDenied      = 3   // the turn completed, but a tool call was denied
	exitInterrupted = 130 // the user interrupted (Ctrl-C), as shells report SIGINT
)

// exitError carries an exit status out of a command; msg is printed to
// stderr unless empty.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func main() {
	if len(os.Args) > 1 && os.Args[1] == "daemon" {
		// `trellis daemon`: may replace the process, before anything starts.
		daemon.KeepSysmonAwake()
	}
	os.Exit(execute(os.Args[1:], newApp(os.Stdin, os.Stdout, os.Stderr)))
}

// execute runs the command line and returns the exit status.
func execute(args []string, a *app) int {
	root := newRootCmd(a)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(a.stderr, "trellis:", ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(a.stderr, "trellis:", err)
	if isUsageError(err) {
		return exitUsage
	}
	return exitFailed
}

// app is what every command shares: the global flags and the standard
// streams.
type app struct {
	home     string
	provider string
	store    string

	stdin          io.Reader
	stdout, stderr io.Writer
	// stdinTTY, stdoutTTY and stderrTTY tell whether the stream is a
	// terminal (questions, spinners and colour only go to terminals).
	stdinTTY, stdoutTTY, stderrTTY bool
	lines                          *lineReader
	// input reads what a person types: stdin's lines, or a line editor
	// when trellis chat runs on a terminal.
	input lineSource
}

// stdoutFile and stderrFile are the standard streams as files when they
// are (the line editor needs them), else os.Stdout / os.Stderr.
func (a *app) stdoutFile() *os.File {
	if f, ok := a.stdout.(*os.File); ok {
		return f
	}
	return os.Stdout
}

func (a *app) stderrFile() *os.File {
	if f, ok := a.stderr.(*os.File); ok {
		return f
	}
	return os.Stderr
}

func newApp(stdin *os.File, stdout, stderr *os.File) *app {
	a := &app{
		stdin: stdin, stdout: stdout, stderr: stderr,
		stdinTTY:  term.IsTerminal(int(stdin.Fd())),
		stdoutTTY: term.IsTerminal(int(stdout.Fd())),
		stderrTTY: term.IsTerminal(int(stderr.Fd())),
	}
	a.lines = newLineReader(stdin)
	a.input = pipeSource{a.lines}
	return a
}

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "trellis",
		Short: "Talk to a Trellis agent daemon: run prompts, chat, manage sessions and approvals",
		Long: `trellis is the command-line client of the Trellis agent runtime.

It talks to the daemon of a home directory (--home, $TRELLIS_HOME, else ~/.trellis)
and starts one in the background when none answers. With no model configured the
daemon plays an offline demo model, so "trellis run hello" works on any machine.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Server,
		// With no subcommand, print the help; an unknown one is a usage
		// error that suggests the nearest ones.
		Args:                       subcommandArgs,
		RunE:                       func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		SuggestionsMinimumDistance: 2,
	}
	// The version system.hello reports as serverVersion: the client and
	// the daemon are built from one tree.
	root.SetVersionTemplate("trellis {{.Version}} (protocol " + version.Protocol + ")\n")
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().StringVar(&a.home, "home", daemon.DefaultHome(), "home directory of the daemon ($TRELLIS_HOME, else ~/.trellis)")
	root.PersistentFlags().StringVar(&a.provider, "provider", "", "model provider for a daemon this command starts, e.g. fake:/path/script.json (a running daemon with another one is reported)"+leftOutNote())
	root.PersistentFlags().StringVar(&a.store, "store", "", "store for a daemon this command starts: sqlite (default) or a postgres:// DSN")
	root.AddCommand(
		newRunCmd(a),
		newChatCmd(a),
		newSessionsCmd(a),
		newApprovalsCmd(a),
		newPrincipalsCmd(a),
		newKeysCmd(a),
		newStatusCmd(a),
		newStopCmd(a),
		newDaemonCmd(a),
		newBenchCmd(a),
		newLogsCmd(a),
		newUICmd(a),
		newMCPCmd(a),
		newBackupCmd(a),
		newRestoreCmd(a),
		newAllowlistCmd(a),
		newCheckpointsCmd(a),
		newJobsCmd(a),
		newProvidersCmd(a),
		newUsageCmd(a),
		newACPCmd(a),
	)
	return root
}

// usageError marks a bad command line (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func isUsageError(err error) bool {
	var u usageError
	return errors.As(err, &u)
}

// Argument validators that mark their failures as usage errors. exactArgs
// and minArgs name the arguments the command's Use line names.
func exactArgs(n int) cobra.PositionalArgs { return argsNamed(n, n, "", "") }
func minArgs(n int) cobra.PositionalArgs   { return argsNamed(n, -1, "", "") }
func noArgs() cobra.PositionalArgs         { return usageArgs(cobra.NoArgs) }

// argsNamed checks that a command has min to max positional arguments (max
// -1: no limit). When it has not, the usage error names what it needs
// (what, e.g. "a PROMPT"; "" takes the upper-case words of the Use line)
// and shows example (default: the command's usage line).
func argsNamed(min, max int, what, example string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) >= min && (max < 0 || len(args) <= max) {
			return nil
		}
		if what == "" {
			what = "its arguments"
			if names := positionals(cmd.Use); len(names) > 0 {
				what = strings.Join(names, " and ")
			}
		}
		if example == "" {
			example = "usage: " + cmd.UseLine()
		}
		// The error is printed after "trellis: ".
		name := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
		if len(args) < min {
			return usageError{fmt.Errorf("%s needs %s: %s", name, what, example)}
		}
		return usageError{fmt.Errorf("%s takes %s, not %d arguments (quote one that has spaces): %s", name, what, len(args), example)}
	}
}

// argName is an argument of a Use line: NAME, NAME|ID, PATTERN-ID...,
// [VENDOR].
var argName = regexp.MustCompile(`^\[?[A-Z][A-Z0-9_|-]*(\.\.\.)?\]?$`)

// positionals returns the argument names of a Use line such as "create
// NAME --role ROLE [--kind K]": its upper-case words that are not a flag's
// value (NAME here).
func positionals(use string) []string {
	var names []string
	words := strings.Fields(use)
	for i, w := range words {
		if i == 0 || strings.HasPrefix(words[i-1], "-") || strings.HasPrefix(words[i-1], "[-") {
			continue
		}
		if argName.MatchString(w) {
			names = append(names, w)
		}
	}
	return names
}

// subcommandArgs is the Args of a command that only groups subcommands:
// an argument is an unknown subcommand, reported with the nearest names.
// (A custom Args keeps cobra from suggesting by itself.)
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %s", args[0], cmd.CommandPath())
	if near := cmd.SuggestionsFor(args[0]); len(near) > 0 {
		msg += "; did you mean " + strings.Join(near, " or ") + "?"
	}
	return usageError{fmt.Errorf("%s (see %s --help)", msg, cmd.CommandPath())}
}

func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// groupCmd makes a command that only groups subcommands: alone, it prints
// its help.
func groupCmd(use, alias, short string) *cobra.Command {
	return &cobra.Command{
		Use:                        use,
		Aliases:                    []string{alias},
		Short:                      short,
		Args:                       subcommandArgs,
		RunE:                       func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		SuggestionsMinimumDistance: 2,
	}
}

// eachID does act on every id, says on stdout what it did to each ("deleted
// s-1") and on stderr why not, and fails when any failed: the commands that
// take several ids (sessions rm, allowlist rm, jobs cancel).
func (a *app) eachID(ids []string, did, noun string, act func(id string) error) error {
	failed := 0
	for _, id := range ids {
		if err := act(id); err != nil {
			fmt.Fprintf(a.stderr, "trellis: %s: %v\n", id, err)
			failed++
			continue
		}
		fmt.Fprintf(a.stdout, "%s %s\n", did, id)
	}
	if failed > 0 {
		return &exitError{code: exitFailed, msg: fmt.Sprintf("%d of %d %s not %s", failed, len(ids), noun, did)}
	}
	return nil
}

// printList prints a list command's result: v as JSON with --json, else a
// table of header and the rows rows writes, tab-separated.
func (a *app) printList(asJSON bool, v any, header string, rows func(tw io.Writer)) error {
	if asJSON {
		return writeJSON(a.stdout, v)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	rows(tw)
	return tw.Flush()
}

// listCmd is a group's `ls` (alias list) over a list call that takes no
// parameters, method (e.g. client.Calls.JobList): its result as a table
// under header (rows writes a line per item), or with --json as the
// protocol renders it.
func listCmd[Q any, R proto.Message](a *app, short string, method func(client.Calls, context.Context, Q) (R, error), name, header string, rows func(io.Writer, R)) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   short,
		Args:    noArgs(),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, _ []string) error {
			var none Q
			r, err := method(c.Calls(), ctx, none)
			if err != nil {
				return err
			}
			return a.printList(asJSON, protocolJSON(r), header, func(tw io.Writer) { rows(tw, r) })
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the "+name+" result as JSON")
	return cmd
}
