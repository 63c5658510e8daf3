package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/daemonfile"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/provider"
)

// newProvidersCmd is `trellis providers`: the model vendors of the daemon
// and their keys, which it keeps in files of mode 0600 and never shows.
func newProvidersCmd(a *app) *cobra.Command {
	cmd := groupCmd("providers", "provider", "List, configure, test and remove model providers (OpenAI, Anthropic)")
	cmd.AddCommand(newProvidersLsCmd(a), newProvidersSetCmd(a), newProvidersTestCmd(a), newProvidersRmCmd(a), newProvidersModelsCmd(a))
	return cmd
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func newProvidersLsCmd(a *app) *cobra.Command {
	return listCmd(a, "List the model providers: which are configured and which one new sessions use (never a key)", client.Calls.ProviderList, "provider.list",
		"VENDOR\tCONFIGURED\tDEFAULT\tMODEL\tBASE URL\tLABEL", func(tw io.Writer, r *trellisv1.ListProvidersResponse) {
			for _, p := range r.GetProviders() {
				base := p.GetBaseUrl()
				if base == "" {
					base = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.GetVendor(), yesNo(p.GetConfigured()), yesNo(p.GetIsDefault()), p.GetDefaultModel(), base, p.GetLabel())
			}
		})
}

// keySource is where trellis providers set reads an API key: never the
// command line, where other users' ps and the shell history would see it.
type keySource struct {
	file, env string
	stdin     bool
	clear     bool
}

func (k *keySource) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&k.file, "api-key-file", "", "read the API key from this file (its first line)")
	cmd.Flags().StringVar(&k.env, "api-key-env", "", "read the API key from this environment variable, e.g. OPENAI_API_KEY")
	cmd.Flags().BoolVar(&k.stdin, "api-key-stdin", false, "read the API key from stdin (typed without echo on a terminal)")
	cmd.Flags().BoolVar(&k.clear, "clear-api-key", false, "forget the stored key (the daemon's environment applies again)")
}

// given counts the key options used.
func (k *keySource) given() int {
	n := 0
	for _, set := range []bool{k.file != "", k.env != "", k.stdin, k.clear} {
		if set {
			n++
		}
	}
	return n
}

// maxKeyInput bounds what is read of stdin for a key.
const maxKeyInput = 64 << 10

// firstLine is the first line of a key file or of stdin that holds
// something: the key, whatever follows it (a newline, comments) left out.
func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimLeft(s, " \t\r\n"), "\n")
	return line
}

// read returns the key (nil: none given; "" with --clear-api-key). Its
// errors never quote the key.
func (k *keySource) read(a *app, vendor string) (*string, error) {
	var raw, from string
	switch {
	case k.clear:
		empty := ""
		return &empty, nil
	case k.file != "":
		b, err := os.ReadFile(k.file)
		if err != nil {
			return nil, usageError{fmt.Errorf("--api-key-file: %w", err)}
		}
		raw, from = firstLine(string(b)), k.file
	case k.env != "":
		raw, from = os.Getenv(k.env), "$"+k.env
		if strings.TrimSpace(raw) == "" {
			return nil, usageError{fmt.Errorf("--api-key-env %s: the variable is not set or empty here", k.env)}
		}
	case k.stdin:
		from = "stdin"
		if f, ok := a.stdin.(*os.File); ok && a.stdinTTY {
			fmt.Fprintf(a.stderr, "API key for %s: ", vendor)
			b, err := term.ReadPassword(int(f.Fd()))
			fmt.Fprintln(a.stderr)
			if err != nil {
				return nil, fmt.Errorf("read the API key: %w", err)
			}
			raw = string(b)
		} else {
			b, err := io.ReadAll(io.LimitReader(a.stdin, maxKeyInput))
			if err != nil {
				return nil, fmt.Errorf("read the API key from stdin: %w", err)
			}
			raw = firstLine(string(b))
		}
	default:
		return nil, nil
	}
	key := strings.TrimSpace(raw)
	if key == "" {
		return nil, usageError{fmt.Errorf("no API key in %s (it is empty)", from)}
	}
	if strings.ContainsFunc(key, func(r rune) bool { return r < ' ' || r == ' ' }) {
		return nil, usageError{fmt.Errorf("the API key in %s holds spaces or control characters: give the key alone", from)}
	}
	return &key, nil
}

func newProvidersSetCmd(a *app) *cobra.Command {
	var key keySource
	var baseURL, model string
	var models []string
	var isDefault bool
	var contextWindow int
	cmd := &cobra.Command{
		Use:   "set VENDOR [--api-key-file PATH | --api-key-env VAR | --api-key-stdin] [--base-url URL] [--model M] [--default]",
		Short: "Configure a provider (openai or anthropic): its key, endpoint and models",
		Long: `Configure a model provider of the running daemon. It takes effect at the next
turn of every session, and lasts across restarts.

The API key is never taken on the command line: give --api-key-file PATH,
--api-key-env VAR (e.g. OPENAI_API_KEY), or --api-key-stdin. The daemon keeps
it in a file of mode 0600 under its home directory and never shows it again.

--base-url points openai at any OpenAI-compatible server (vLLM, Ollama,
llama.cpp, OpenRouter); a local one needs no key. --default makes the vendor
the one new sessions use.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if key.given() > 1 {
				return usageError{errors.New("give one of --api-key-file, --api-key-env, --api-key-stdin and --clear-api-key")}
			}
			flags := cmd.Flags()
			if key.given() == 0 && !flags.Changed("base-url") && !flags.Changed("model") && !flags.Changed("models") &&
				!flags.Changed("default") && !flags.Changed("context-window") {
				return usageError{errors.New("nothing to set: give an API key (--api-key-file, --api-key-env or --api-key-stdin), --base-url, --model, --models, --default or --context-window")}
			}
			if contextWindow < 0 || contextWindow > math.MaxInt32 {
				return usageError{fmt.Errorf("--context-window %d: want a number of tokens (0 = the known value)", contextWindow)}
			}
			apiKey, err := key.read(a, args[0])
			if err != nil {
				return err
			}
			config := &trellisv1.ProviderConfig{ApiKey: apiKey}
			var set []string
			if apiKey != nil {
				set = append(set, map[bool]string{true: "API key removed", false: "API key"}[*apiKey == ""])
			}
			if flags.Changed("base-url") {
				config.BaseUrl = &baseURL
				set = append(set, "base URL")
			}
			if flags.Changed("model") {
				config.Model = &model
				set = append(set, "model "+model)
			}
			if flags.Changed("models") {
				config.Models = models
				set = append(set, "models")
			}
			if flags.Changed("default") {
				config.IsDefault = &isDefault
				set = append(set, map[bool]string{true: "default", false: "not default"}[isDefault])
			}
			if flags.Changed("context-window") {
				config.ContextWindow = proto.Int32(int32(contextWindow))
				set = append(set, "context window")
			}
			ctx := cmd.Context()
			c, err := a.connectRunning(ctx, client.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := c.Calls().ProviderConfigure(ctx, &trellisv1.ConfigureProviderRequest{Vendor: args[0], Config: config}); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "trellis: configured %s: %s (trellis providers test %s checks it)\n", args[0], strings.Join(set, ", "), args[0])
			return nil
		},
	}
	key.flags(cmd)
	cmd.Flags().StringVar(&baseURL, "base-url", "", "the vendor's endpoint, e.g. http://localhost:11434/v1 (empty: back to the default)")
	cmd.Flags().StringVar(&model, "model", "", "the model sessions use when they name none")
	cmd.Flags().StringSliceVar(&models, "models", nil, "the models to offer, comma-separated")
	cmd.Flags().BoolVar(&isDefault, "default", false, "make it the provider of new sessions (--default=false: back to the automatic choice)")
	cmd.Flags().IntVar(&contextWindow, "context-window", 0, "the context window of its models in tokens, for models the daemon does not know (0: the known value)")
	return cmd
}

func newProvidersTestCmd(a *app) *cobra.Command {
	var model string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "test VENDOR [--model M]",
		Short: "Send one short prompt to a provider to check its key, endpoint and model (exit 1 when it fails)",
		Args:  exactArgs(1),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			params := &trellisv1.TestProviderRequest{Provider: args[0]}
			if model != "" {
				params.Model = &model
			}
			stop := a.spin("testing " + args[0])
			r, err := c.Calls().ProviderTest(ctx, params)
			stop()
			if err != nil {
				return err
			}
			if asJSON {
				if err := writeJSON(a.stdout, protocolJSON(r)); err != nil {
					return err
				}
			} else if r.GetOk() {
				fmt.Fprintf(a.stdout, "ok\t%s\t%s\t%d ms\t%s\n", r.GetProvider(), r.GetModel(), r.GetLatencyMs(), shorten(r.GetReply(), 60))
			}
			if !r.GetOk() {
				return &exitError{code: exitFailed, msg: fmt.Sprintf("%s (model %s) failed: %s", args[0], orDash(&r.Model), r.GetError())}
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&model, "model", "", "the model to test (default: the vendor's default model)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the provider.test result as JSON")
	return cmd
}

func newProvidersRmCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "rm VENDOR",
		Aliases: []string{"remove"},
		Short:   "Forget a provider's stored key, settings and default choice (its environment variables still apply)",
		Args:    exactArgs(1),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			if _, err := c.Calls().ProviderRemove(ctx, &trellisv1.RemoveProviderRequest{Vendor: args[0]}); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "trellis: removed the configuration of %s\n", args[0])
			return nil
		}),
	}
}

func newProvidersModelsCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "models [VENDOR]",
		Short: "List a provider's models (the default provider's without VENDOR), asking its endpoint when configured",
		Args:  usageArgs(cobra.MaximumNArgs(1)),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			params := &trellisv1.ListModelsRequest{}
			if len(args) == 1 {
				params.Vendor = &args[0]
			}
			r, err := c.Calls().ProviderModels(ctx, params)
			if err != nil {
				return err
			}
			if !asJSON {
				note := r.GetSource()
				if r.GetDetail() != "" {
					note += ": " + r.GetDetail()
				}
				fmt.Fprintf(a.stderr, "trellis: the models of %s (%s)\n", r.GetVendor(), note)
			}
			return a.printList(asJSON, protocolJSON(r), "MODEL\tDEFAULT", func(tw io.Writer) {
				for _, m := range r.GetModels() {
					fmt.Fprintf(tw, "%s\t%s\n", m, yesNo(m == r.GetCurrent()))
				}
			})
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the provider.models result as JSON")
	return cmd
}

// warnUnusedKeys says on stderr, one line a vendor, when this command's
// environment holds a vendor's API key (OPENAI_API_KEY, ...) that the
// running daemon does not use: the daemon reads the environment only when
// it starts, so one started earlier without the key answers with another
// provider, the offline demo model at worst, and nothing would say so.
func (a *app) warnUnusedKeys(ctx context.Context, c *client.Client, info daemonfile.Info) {
	var inEnv []provider.EnvKey
	for _, k := range provider.EnvKeys() {
		if strings.TrimSpace(os.Getenv(k.Env)) != "" && slices.Contains(provider.CompiledIn(), k.Vendor) {
			inEnv = append(inEnv, k)
		}
	}
	if len(inEnv) == 0 {
		return
	}
	r, err := c.Calls().ProviderList(ctx, nil)
	if err != nil {
		return // the run itself reports a daemon that does not answer
	}
	configured, def := map[string]bool{}, provider.Fake
	for _, p := range r.GetProviders() {
		configured[p.GetVendor()] = p.GetConfigured()
		if p.GetIsDefault() {
			def = p.GetVendor()
		}
	}
	for _, k := range inEnv {
		if configured[k.Vendor] {
			continue
		}
		fmt.Fprintf(a.stderr, "trellis: %s is set, but the running daemon (pid %d) was started without it and does not use %s (new sessions use %s); "+
			"to use it: trellis providers set %s --api-key-env %s, or trellis stop and run again\n",
			k.Env, info.PID, k.Vendor, def, k.Vendor, k.Env)
	}
}
