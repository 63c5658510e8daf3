//go:build !trellis_lean

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/bench"
)

// newBenchCmd is `trellis bench`: the benchmarks of package bench, each
// printing a table and one JSON line on stdout (progress goes to stderr).
func newBenchCmd(a *app) *cobra.Command {
	var inProcess bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the daemon: fanout, append, conns, sessions, replay, stream, scale, soak (see docs/performance.md)",
		Long: `trellis bench measures speed and memory as ratios against baselines measured in the
same run. Each bench starts a fresh daemon with a temporary home and a fake model
script of its own, as a child process ("trellis daemon"), unless --in-process runs it
inside this process; conns can instead measure a running daemon named with --home.
append needs no daemon; scale starts its own daemons on a fresh PostgreSQL database. Each prints a table, then one JSON line; progress goes to
stderr. docs/performance.md explains the figures.`,
		Args: noArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().BoolVar(&inProcess, "in-process", false, "run the fresh daemon inside this process instead of as a child process")
	var daemonFlags []string
	cmd.PersistentFlags().StringArrayVar(&daemonFlags, "daemon-flag", nil, "a flag for the fresh child daemon, e.g. --daemon-flag=--merge-deltas=0 (repeatable)")
	target := func(cmd *cobra.Command) (bench.Daemon, error) {
		d := bench.Daemon{Progress: a.stderr}
		switch {
		case cmd.Flags().Changed("home"):
			d.Home = a.home
		case !inProcess:
			exe, err := os.Executable()
			if err != nil {
				return d, fmt.Errorf("cannot find this program to start a daemon (use --in-process): %w", err)
			}
			d.Command = []string{exe, "daemon"}
		}
		if len(daemonFlags) > 0 && len(d.Command) == 0 {
			return d, fmt.Errorf("--daemon-flag needs a fresh child daemon (not --in-process or --home)")
		}
		d.Flags = daemonFlags
		return d, nil
	}
	run := func(cmd *cobra.Command, f func(ctx context.Context, d bench.Daemon) (bench.Result, error)) error {
		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		d, err := target(cmd)
		if err != nil {
			return err
		}
		r, err := f(ctx, d)
		if err != nil {
			return err
		}
		_, err = r.WriteTo(a.stdout)
		return err
	}

	// command is a bench's subcommand: measure runs on the daemon its
	// flags name.
	command := func(use, short string, measure func(ctx context.Context, d bench.Daemon) (bench.Result, error)) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, Args: noArgs(), RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd, measure)
		}}
	}

	var fo bench.FanoutOptions
	fanout := command("fanout", "N WebSocket clients vs N direct gRPC Subscribe streams on one streaming session",
		func(ctx context.Context, d bench.Daemon) (bench.Result, error) {
			fo.Daemon = d
			return bench.Fanout(ctx, fo)
		})
	fanout.Flags().IntVar(&fo.Clients, "clients", 100, "subscribers of each kind")
	fanout.Flags().IntVar(&fo.Events, "events", 20_000, "message.delta events in the measured turn")
	fanout.Flags().IntVar(&fo.PacedEvents, "paced-events", 1000, "message.delta events in the latency turn")
	fanout.Flags().Float64Var(&fo.PacedSec, "paced-sec", 4, "seconds the latency turn takes")
	fanout.Flags().IntVar(&fo.Rounds, "rounds", 1, "rounds of both phases (figures are medians)")
	fanout.Flags().IntVar(&fo.Sessions, "sessions", 1, "streaming sessions with one client each (above 1: --events is shared among them, at least 1,000 each; --clients and the paced turn are not used)")

	var ao bench.AppendOptions
	appendCmd := command("append", "Event-log append: group commit vs one transaction per event vs raw bulk insert",
		func(ctx context.Context, d bench.Daemon) (bench.Result, error) {
			ao.Progress = d.Progress
			return bench.Append(ctx, ao)
		})
	appendCmd.Flags().StringVar(&ao.Dir, "dir", "", "directory for the database files (default: a temporary one)")
	appendCmd.Flags().IntVar(&ao.Events, "events", 100_000, "events of the group-commit and bulk runs")
	appendCmd.Flags().IntVar(&ao.BaselineEvents, "baseline-events", 2_000, "events of the one-transaction-per-event run")
	appendCmd.Flags().IntVar(&ao.Writers, "writers", 64, "goroutines appending at once")
	appendCmd.Flags().IntVar(&ao.BulkBatch, "bulk-batch", 10_000, "events per raw bulk transaction")
	appendCmd.Flags().IntVar(&ao.Rounds, "rounds", 3, "interleaved rounds of the four runs (figures are medians)")

	var co bench.ConnsOptions
	conns := command("conns", "Daemon RSS per idle authenticated WebSocket connection",
		func(ctx context.Context, d bench.Daemon) (bench.Result, error) {
			co.Daemon = d
			return bench.Conns(ctx, co)
		})
	conns.Flags().IntVar(&co.Conns, "conns", 10_000, "idle connections to open")
	conns.Flags().IntVar(&co.Parallel, "parallel", 64, "handshakes at once")
	conns.Flags().DurationVar(&co.Settle, "settle", 3*time.Second, "idle time before each RSS reading")

	var so bench.SessionsOptions
	sessions := command("sessions", "Many sessions streaming fake output at once: event rate, delta latency, events lost",
		func(ctx context.Context, d bench.Daemon) (bench.Result, error) {
			so.Daemon = d
			return bench.Sessions(ctx, so)
		})
	sessions.Flags().IntVar(&so.Sessions, "sessions", 1000, "sessions streaming at once")
	sessions.Flags().IntVar(&so.Deltas, "deltas", 300, "message.delta events per session")
	sessions.Flags().Float64Var(&so.StreamSec, "stream-sec", 10, "seconds each turn takes to stream its deltas")
	sessions.Flags().BoolVar(&so.Unpaced, "unpaced", false, "stream as fast as the daemon takes it (capacity)")
	sessions.Flags().IntVar(&so.Conns, "conns", 50, "WebSocket connections carrying the sessions")

	var ro bench.ReplayOptions
	replay := command("replay", "session.resume of a long session vs a raw scan of the same rows",
		func(ctx context.Context, d bench.Daemon) (bench.Result, error) {
			ro.Daemon = d
			return bench.Replay(ctx, ro)
		})
	replay.Flags().IntVar(&ro.Events, "events", 100_000, "message.delta events in the replayed session")
	replay.Flags().IntVar(&ro.Rounds, "rounds", 3, "timed rounds of each reader (the best counts)")

	var sto bench.StreamOptions
	stream := command("stream", "a local OpenAI-compatible server's stream through the openai provider vs reading it directly; paced sessions' latency, CPU and RSS",
		func(ctx context.Context, d bench.Daemon) (bench.Result, error) {
			sto.Daemon = d
			return bench.Stream(ctx, sto)
		})
	stream.Flags().IntVar(&sto.Deltas, "deltas", 50_000, "deltas of the full-speed stream")
	stream.Flags().IntVar(&sto.PacedSessions, "paced-sessions", 20, "sessions streaming at once in the paced phase")
	stream.Flags().IntVar(&sto.PacedRate, "paced-rate", 100, "deltas per second of each paced session")
	stream.Flags().Float64Var(&sto.PacedSec, "paced-sec", 5, "seconds each paced session streams")

	var do bench.DensityOptions
	density := command("density", "paced sessions (a real model's pace through the openai provider, a WebSocket client each), doubling until the added latency p99 passes a limit: sessions carried, CPU per chunk, sessions per core, RSS per session",
		func(ctx context.Context, d bench.Daemon) (bench.Result, error) {
			do.Daemon = d
			return bench.Density(ctx, do)
		})
	density.Flags().IntVar(&do.Rate, "rate", 100, "chunks per second of each session")
	density.Flags().IntVar(&do.Chunks, "chunks", 1000, "chunks of each session's turn")
	density.Flags().IntVar(&do.Start, "start", 20, "sessions of the first step (each step doubles them)")
	density.Flags().IntVar(&do.Max, "max", 1280, "most sessions tried")
	density.Flags().Float64Var(&do.P99LimitMs, "p99-limit-ms", 50, "added latency p99 past which a step is not carried")

	var cko bench.CheckpointOptions
	checkpoint := command("checkpoint", "the same write-tool turns on a daemon recording checkpoints and on one that does not, alternated: checkpoints' cost per write tool call, and the store's growth per turn",
		func(ctx context.Context, d bench.Daemon) (bench.Result, error) {
			cko.Daemon = d
			return bench.Checkpoint(ctx, cko)
		})
	checkpoint.Flags().IntVar(&cko.Turns, "turns", 20, "turns of each daemon in each round, one write tool call each")
	checkpoint.Flags().IntVar(&cko.ChangeKiB, "change-kib", 1024, "KiB each call writes (fresh random bytes over one file)")
	checkpoint.Flags().IntVar(&cko.Files, "files", 200, "other files of the workdir (4 KiB each), which every checkpoint walks")
	checkpoint.Flags().IntVar(&cko.Rounds, "rounds", 3, "rounds alternating the two daemons")

	var sco bench.ScaleOptions
	scale := command("scale", "1 then N trellisd processes on one fresh PostgreSQL database: aggregate event rate N ÷ 1, cross-daemon live-event delay",
		func(ctx context.Context, d bench.Daemon) (bench.Result, error) {
			sco.Daemon = d
			return bench.Scale(ctx, sco)
		})
	scale.Flags().StringVar(&sco.DSN, "dsn", "", "PostgreSQL server to create the bench's database on (default $TRELLIS_TEST_POSTGRES)")
	scale.Flags().IntVar(&sco.Daemons, "daemons", 3, "daemons of the cluster phase")
	scale.Flags().IntVar(&sco.Sessions, "sessions", 60, "sessions streaming at once in each phase, spread over the daemons")
	scale.Flags().IntVar(&sco.Deltas, "deltas", 2500, "message.delta events per session, unpaced")
	scale.Flags().IntVar(&sco.ConnsPerDaemon, "conns", 4, "gRPC connections to each daemon")
	scale.Flags().IntVar(&sco.PacedEvents, "paced-events", 600, "message.delta events of each latency turn")
	scale.Flags().Float64Var(&sco.PacedSec, "paced-sec", 3, "seconds each latency turn takes")

	var soo bench.SoakOptions
	soak := command("soak", "2,000 sessions created, prompted, closed and deleted over 10 minutes: do the daemon's RSS, goroutines and open files stay flat",
		func(ctx context.Context, d bench.Daemon) (bench.Result, error) {
			soo.Daemon = d
			return bench.Soak(ctx, soo)
		})
	soak.Flags().IntVar(&soo.Sessions, "sessions", 2000, "sessions over the soak")
	soak.Flags().DurationVar(&soo.Duration, "duration", 10*time.Minute, "time the sessions are spread over")
	soak.Flags().IntVar(&soo.Concurrency, "concurrency", 16, "sessions in flight at most")
	soak.Flags().IntVar(&soo.Conns, "conns", 4, "long-lived WebSocket connections carrying the sessions")
	soak.Flags().IntVar(&soo.FreshConnEvery, "fresh-conn-every", 10, "every n-th session gets a connection of its own")
	soak.Flags().IntVar(&soo.Deltas, "deltas", 50, "model chunks of each session's turn")
	soak.Flags().Float64Var(&soo.TurnSec, "turn-sec", 1, "seconds each turn takes to stream its chunks")
	soak.Flags().DurationVar(&soo.SampleEvery, "sample-every", 5*time.Second, "time between two readings of the daemon")
	soak.Flags().Float64Var(&soo.Tolerance, "tolerance", 0.1, "growth a flat reading may show (0.1: 10 %)")

	cmd.AddCommand(fanout, appendCmd, conns, sessions, replay, stream, density, checkpoint, scale, soak)
	return cmd
}
