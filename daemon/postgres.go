//go:build !trellis_lean

package daemon

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/trellis-run/trellis/runtime/job"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres"
)

// This file holds everything of the daemon that links the PostgreSQL
// driver (pgx); a lean build (-tags trellis_lean) has postgres_lean.go
// instead, and serves SQLite only.

// checkPostgresDSN reports what is wrong with a postgres:// DSN (its
// message hides the password).
func checkPostgresDSN(dsn string) error {
	_, err := pgconn.ParseConfig(dsn)
	return err
}

// postgresPorts are the ports of every host a DSN names.
func postgresPorts(dsn string) []int {
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil
	}
	ports := []int{int(pc.Port)}
	for _, f := range pc.Fallbacks {
		ports = append(ports, int(f.Port))
	}
	return ports
}

// openPostgres opens the PostgreSQL store cfg.Store names.
func openPostgres(ctx context.Context, cfg Config) (store.Store, error) {
	// A lock wait ends (store_busy) well within the lease, so that one
	// blocked statement cannot outlast the owner's hold on a session.
	timeouts := postgres.DefaultTimeouts
	timeouts.Lock = cfg.Lease / 4
	opts := []postgres.Option{postgres.WithTimeouts(timeouts)}
	if cfg.Durability == DurabilityBatch {
		opts = append(opts, postgres.WithBatchDurability())
	}
	return postgres.Open(ctx, cfg.Store, opts...)
}

// sharedStore is st as a store several daemons share, if it is one.
func sharedStore(st store.Store) (clusterStore, bool) {
	pg, ok := st.(*postgres.Store)
	return pg, ok
}

// openPostgresJobs starts the job queue in st when st is the PostgreSQL
// store (ok false otherwise): River then shares the database, so that
// daemons sharing the store share the queue and a slot runs once among
// them. Daemons starting together migrate River's tables one at a time.
func openPostgresJobs(ctx context.Context, st store.Store, deps job.Deps) (jobs *job.Service, ok bool, err error) {
	pg, ok := st.(*postgres.Store)
	if !ok {
		return nil, false, nil
	}
	err = pg.WithLock(ctx, "river-migrate", func() error {
		var err error
		jobs, err = job.New(ctx, riverpgxv5.New(pg.Pool()), deps, job.QueueOptions{})
		return err
	})
	return jobs, true, err
}
