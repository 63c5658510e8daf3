package daemon

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/pricing"
	"github.com/trellis-run/trellis/runtime/provider"
	"github.com/trellis-run/trellis/runtime/tool/mcp"
)

// ConfigCommand runs "NAME config check|print [flags]" (args are what
// follows "config"; the flags are the daemon's, --config among them) and
// returns the exit status:
//
//   - check validates the configuration file and the configuration that
//     results (what the daemon checks at start, where it can without
//     starting) and prints every problem, a line each, on stderr (exit 1),
//     or "ok" on stdout;
//   - print writes the effective configuration (flags over environment
//     variables over the file over the defaults) as TOML on stdout, with
//     the passwords it holds masked.
func ConfigCommand(name string, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "check" && args[0] != "print") {
		fmt.Fprintf(stderr, "%s config: want check or print, e.g. %s config check --config trellisd.toml\n", name, name)
		return 2
	}
	cmd := name + " config " + args[0]
	cfg, src, problems, err := load(cmd, args[1:], os.Getenv)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrVersion):
		fmt.Fprintf(stderr, "%s: --version: not with config\n", cmd)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 2
	}
	cfg = cfg.WithDefaults()
	if args[0] == "print" {
		if len(problems) > 0 {
			printProblems(stderr, problems)
			return 1
		}
		return printConfig(stdout, stderr, cfg)
	}
	problems = sortProblems(append(problems, src.locate(append(cfg.problems(), cfg.fileProblems()...))...))
	if len(problems) > 0 {
		printProblems(stderr, problems)
		return 1
	}
	fmt.Fprintln(stdout, "ok")
	return 0
}

func printProblems(w io.Writer, problems []Problem) {
	for _, p := range problems {
		fmt.Fprintln(w, strings.ReplaceAll(p.Error(), "\n", "; "))
	}
}

// fileProblems checks the files c names as the daemon reads them at start:
// the TLS and cluster certificates and keys, the MCP servers file, the
// price file, the secrets key, a fake provider's script; and that Home and Workdir, where
// they exist, are directories.
func (c Config) fileProblems() []Problem {
	var problems []Problem
	add := func(err error, keys ...string) { problems = append(problems, Problem{Keys: keys, Err: err}) }
	quiet := slog.New(slog.DiscardHandler)
	if c.TLSCert != "" && c.TLSKey != "" {
		if _, err := newCertReloader(c.TLSCert, c.TLSKey, "tls", quiet); err != nil {
			add(fmt.Errorf("tls-cert and tls-key: %w", err), "tls-cert", "tls-key")
		}
	}
	if countSet(c.ClusterCA, c.ClusterCert, c.ClusterKey) == 3 {
		if _, err := newClusterCerts(c, quiet); err != nil {
			add(fmt.Errorf("cluster-ca, cluster-cert and cluster-key: %w", err), "cluster-ca", "cluster-cert", "cluster-key")
		}
	}
	if c.MCPConfig != "" {
		if _, err := mcp.Load(c.MCPConfig, false); err != nil {
			add(fmt.Errorf("mcp-config: %w", err), "mcp-config")
		}
	}
	if c.Prices != "" {
		if _, err := pricing.Open(c.Prices, provider.VendorNames(), quiet); err != nil {
			add(fmt.Errorf("prices: %w", err), "prices")
		}
	}
	if c.SecretsKeyFile != "" {
		if _, err := provider.LoadSecretsKey(c.SecretsKeyFile, func(string) string { return "" }); err != nil {
			add(fmt.Errorf("secrets-key-file: %w", err), "secrets-key-file")
		}
	}
	if c.Provider != "" {
		spec, err := llm.ParseSpec(c.Provider)
		switch {
		case err != nil:
			add(fmt.Errorf("provider: %w", err), "provider")
		case spec.Vendor == "fake" && spec.Arg != "":
			if _, err := os.Stat(spec.Arg); err != nil {
				add(fmt.Errorf("provider: the fake provider's script: %w", err), "provider")
			}
		}
	}
	for _, d := range []struct{ key, path string }{{"home", c.Home}, {"workdir", c.Workdir}} {
		if st, err := os.Stat(d.path); err == nil && !st.IsDir() {
			add(fmt.Errorf("%s %s: not a directory", d.key, d.path), d.key)
		}
	}
	return problems
}

// printConfig writes c as a configuration file, passwords masked.
func printConfig(stdout, stderr io.Writer, c Config) int {
	fmt.Fprintln(stdout, "# The effective configuration of trellisd (flags, then environment variables, then the file, then the defaults); passwords masked.")
	if err := toml.NewEncoder(stdout).Encode(fileConfigOf(c)); err != nil {
		fmt.Fprintln(stderr, "config print:", err)
		return 1
	}
	return 0
}

// fileConfigOf is c as a configuration file says it, with the passwords of
// the store DSN and of the search provider's URL masked. A value the
// daemon holds as "off" (negative) is written as the flag says off: 0.
func fileConfigOf(c Config) FileConfig {
	off := func(d time.Duration) Duration { return Duration(max(d, 0)) }
	return FileConfig{
		Home:                      c.Home,
		Host:                      c.Host,
		TLSCert:                   c.TLSCert,
		TLSKey:                    c.TLSKey,
		ClusterCA:                 c.ClusterCA,
		ClusterCert:               c.ClusterCert,
		ClusterKey:                c.ClusterKey,
		InsecureNoTLS:             c.InsecureNoTLS,
		Port:                      c.Port,
		GRPCPort:                  c.GRPCPort,
		GatewayPort:               c.GatewayPort,
		Provider:                  c.Provider,
		ProviderConcurrency:       c.ProviderConcurrency,
		ProviderRPM:               c.ProviderRPM,
		BudgetDefaultCostMicroUSD: c.BudgetDefaultCostMicroUSD,
		BudgetDefaultTokens:       c.BudgetDefaultTokens,
		Store:                     maskPassword(c.Store),
		AllowOrigin:               append([]string{}, c.AllowOrigins...),
		LogLevel:                  c.LogLevel,
		ApprovalTimeout:           Duration(c.ApprovalTimeout),
		CommitLinger:              off(c.CommitLinger),
		MergeDeltas:               max(c.MergeDeltas, 0),
		Durability:                c.Durability,
		MaxConnections:            c.MaxConnections,
		MaxWatchedSessions:        c.MaxWatchedSessions,
		MaxInFlight:               c.MaxInFlight,
		HelloTimeout:              Duration(c.HelloTimeout),
		OperationWindow:           Duration(c.OperationWindow),
		MaxUnauthenticated:        c.MaxUnauthenticated,
		MCPConfig:                 c.MCPConfig,
		Prices:                    c.Prices,
		SearchProvider:            maskSearchProvider(c.SearchProvider),
		WebFetchAllowPrivate:      c.WebFetchAllowPrivate,
		BrowserProvider:           c.BrowserProvider,
		BrowserChromium:           c.BrowserChromium,
		LogStderr:                 c.LogToStderr,
		LogMaxSize:                c.LogMaxSizeMB,
		LogMaxFiles:               c.LogMaxFiles,
		UnsandboxedCommands:       c.UnsandboxedCommands,
		ToolEnv:                   append([]string{}, c.ToolEnv...),
		CommandAllowPorts:         append([]int{}, c.CommandAllowPorts...),
		OutputMaxAge:              off(c.OutputMaxAge),
		OutputMaxSize:             max(c.OutputMaxMB, 0),
		CommandNetwork:            c.CommandNetwork,
		Lease:                     Duration(c.Lease),
		TokenFile:                 c.TokenFile,
		SecretsKeyFile:            c.SecretsKeyFile,
		Advertise:                 c.Advertise,
		Workdir:                   c.Workdir,
		WorkspaceRoot:             c.WorkspaceRoot,
		Checkpoints:               !c.NoCheckpoints,
		CheckpointMaxFile:         max(c.CheckpointMaxFile, 0),
		CheckpointQuota:           max(c.CheckpointQuotaMB, 0),
		Retain:                    off(c.Retain),
		RetainLatest:              c.RetainLatest,
		RetainPer:                 c.RetainPer,
	}
}

// masked replaces a password in what config print shows.
const masked = "*****"

// maskPassword masks the password of a URL (postgres://user:pw@host/db)
// and the password parameters of its query; anything else is returned as
// it is.
func maskPassword(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return s
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), masked)
	}
	q := u.Query()
	for k := range q {
		if strings.Contains(strings.ToLower(k), "password") {
			q.Set(k, masked)
		}
	}
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	// url escapes the asterisks of the mask; they are shown as typed.
	return strings.ReplaceAll(u.String(), url.QueryEscape(masked), masked)
}

// maskSearchProvider masks the password of a search provider's URL
// (searxng=https://user:pw@host).
func maskSearchProvider(s string) string {
	kind, arg, ok := strings.Cut(s, "=")
	if !ok {
		return s
	}
	return kind + "=" + maskPassword(arg)
}
