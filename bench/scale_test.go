package bench

import (
	"context"
	"errors"
	"testing"

	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TestScaleSmall runs the scale bench at a tiny size: 1 then 2 trellisd
// child processes on a fresh database; every event reaches its subscriber
// once and the sessions of the cluster phase are owned by both daemons.
func TestScaleSmall(t *testing.T) {
	dsn := pgtest.Server(t)
	r, err := Scale(context.Background(), ScaleOptions{
		Daemon: Daemon{Command: []string{trellisd(t)}, Progress: progress(t)},
		DSN:    dsn, Daemons: 2, Sessions: 6, Deltas: 100, ConnsPerDaemon: 2, PacedEvents: 40, PacedSec: 0.4,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, "single_deltas_per_s", "cluster_deltas_per_s", "ratio", "cross_extra_p50_ms", "cross_extra_p99_ms",
		"single_daemon_cpu_cores", "cluster_daemons_cpu_cores", "cluster_owners", "lost", "duplicated")
	if r.Figure("lost") != 0 || r.Figure("duplicated") != 0 {
		t.Fatalf("lost %v, duplicated %v", r.Figure("lost"), r.Figure("duplicated"))
	}
	if got, want := r.Figure("deltas"), float64(2*6*100); got != want {
		t.Fatalf("received %v model chunks, want %v", got, want)
	}
	if r.Figure("cluster_owners") != 2 {
		t.Fatalf("the cluster phase's sessions are owned by %v daemons, want 2", r.Figure("cluster_owners"))
	}
}

// TestScaleNeeds: without a PostgreSQL server, or asked to run in this
// process, Scale refuses with a message saying what it needs.
func TestScaleNeeds(t *testing.T) {
	t.Setenv(postgresEnv, "")
	if _, err := Scale(context.Background(), ScaleOptions{Daemon: Daemon{Command: []string{"trellisd"}}}); !errors.Is(err, ErrNoPostgres) {
		t.Fatalf("no DSN: %v, want ErrNoPostgres", err)
	}
	if _, err := Scale(context.Background(), ScaleOptions{DSN: pgtest.Example}); !errors.Is(err, errScaleInProcess) {
		t.Fatalf("no command: %v, want errScaleInProcess", err)
	}
}
