// Command trellisd is the Trellis daemon: it hosts agent sessions and serves
// them over gRPC, JSON-RPC/WebSocket and REST (see PROTOCOL.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/version"
)

func main() {
	if args, ok := daemon.ConfigSubcommand(os.Args[1:]); ok {
		os.Exit(daemon.ConfigCommand("trellisd", args, os.Stdout, os.Stderr))
	}
	cfg, err := daemon.ParseFlags("trellisd", os.Args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0) // ParseFlags printed the usage
	case errors.Is(err, daemon.ErrVersion):
		// The version system.hello reports as serverVersion.
		fmt.Printf("trellisd %s (protocol %s)\n", version.Server, version.Protocol)
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "trellisd:", err)
		os.Exit(2)
	}
	daemon.KeepSysmonAwake() // may replace the process: before anything starts
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "trellisd:", err)
		os.Exit(1)
	}
}
