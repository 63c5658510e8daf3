// Command trellisd is the Trellis daemon: it hosts agent sessions and serves
// them over gRPC, JSON-RPC/WebSocket and REST (see PROTOCOL.md).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/trellis-run/trellis/daemon"
)

func main() {
	cfg, err := daemon.ParseFlags(os.Args[0], os.Args[1:])
	if err != nil {
		os.Exit(2) // the flag package already printed the problem
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "trellisd:", err)
		os.Exit(1)
	}
}
