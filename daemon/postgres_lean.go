//go:build trellis_lean

package daemon

import (
	"context"
	"errors"

	"github.com/trellis-run/trellis/runtime/job"
	"github.com/trellis-run/trellis/runtime/store"
)

// A lean build (-tags trellis_lean, the README's first run) leaves the
// PostgreSQL driver out: --store postgres://… is refused by Validate.
var errNoPostgres = errors.New("this build of trellis leaves the PostgreSQL driver out (-tags trellis_lean); build without the tag (go build ./cmd/trellisd) to use a postgres:// store")

func checkPostgresDSN(string) error { return errNoPostgres }

func postgresPorts(string) []int { return nil }

func openPostgres(context.Context, Config) (store.Store, error) { return nil, errNoPostgres }

func sharedStore(store.Store) (clusterStore, bool) { return nil, false }

func openPostgresJobs(context.Context, store.Store, job.Deps) (*job.Service, bool, error) {
	return nil, false, nil
}
