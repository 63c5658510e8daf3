package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/daemonfile"
)

// systemInfo is the result of system.info.
type systemInfo struct {
	Version         string         `json:"version"`
	ProtocolVersion string         `json:"protocolVersion"`
	PID             int            `json:"pid"`
	Port            int            `json:"port"`
	GRPCPort        int            `json:"grpcPort"`
	StartedAt       string         `json:"startedAt"`
	Home            string         `json:"home"`
	Counters        map[string]int `json:"counters"`
	Store           string         `json:"store"`
}

func newStatusCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Tell whether the daemon runs, and what it holds",
		Args:  noArgs(),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, _ []string) error {
			var info systemInfo
			if err := c.Call(ctx, "system.info", nil, &info); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, info)
			}
			fmt.Fprintf(a.stdout, "daemon %s (protocol %s) running since %s\n", info.Version, info.ProtocolVersion, info.StartedAt)
			fmt.Fprintf(a.stdout, "  pid %d, port %d, gRPC port %d, store %s\n", info.PID, info.Port, info.GRPCPort, info.Store)
			fmt.Fprintf(a.stdout, "  home %s, log %s\n", info.Home, daemon.LogPath(info.Home))
			fmt.Fprintf(a.stdout, "  sessions %d, running turns %d, jobs %d, connections %d\n",
				info.Counters["sessions"], info.Counters["runningTurns"], info.Counters["jobs"], info.Counters["connections"])
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the system.info result as JSON")
	return cmd
}

// stopWait bounds how long trellis stop waits for the daemon to go.
const stopWait = 30 * time.Second

func newStopCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "stop",
		Short: "Stop the daemon gracefully and wait until it is gone",
		Args:  noArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			info, err := daemonfile.Read(a.home)
			if errors.Is(err, daemonfile.ErrNoDaemon) {
				fmt.Fprintf(a.stderr, "trellis: no daemon is running for %s\n", a.home)
				return nil
			}
			if err != nil {
				return err
			}
			c, err := client.DialInfo(ctx, info, client.Options{ClientKind: "cli"})
			if err != nil {
				return fmt.Errorf("connect to the daemon (pid %d): %w", info.PID, err)
			}
			err = c.Call(ctx, "system.shutdown", nil, nil)
			c.Close()
			if err != nil && !errors.Is(err, client.ErrClosed) {
				return err
			}
			stop := a.spin("stopping the daemon")
			err = waitGone(ctx, a.home, info.PID)
			stop()
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "trellis: stopped the daemon (pid %d)\n", info.PID)
			return nil
		},
	}
}

// waitGone waits until daemon.json is gone (or names another process) and
// the process pid has exited.
func waitGone(ctx context.Context, home string, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, stopWait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := daemonfile.Read(home)
		gone := errors.Is(err, daemonfile.ErrNoDaemon) || (err == nil && info.PID != pid)
		if gone && !processAlive(pid) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the daemon (pid %d) is still running after %v; see %s", pid, stopWait, daemon.LogPath(home))
		case <-tick.C:
		}
	}
}
