package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sort"

	"github.com/trellis-run/trellis/runtime/store"
)

// LeaseReader reads a session's lease row inside the writing transaction;
// found is false when the session has none.
type LeaseReader func(sessionID string) (owner string, epoch int64, found bool, err error)

// CheckFences verifies, through read inside the writing transaction, that
// each session of ids that ctx's fences name still has the fence's owner
// and epoch (store.ErrLeaseLost otherwise); nil ids check every fence of
// ctx (a write not keyed by session, a setting). Every fenced SQL write of
// both backends checks through it.
func CheckFences(ctx context.Context, ids []string, read LeaseReader) error {
	fences, fenced := fencesOf(ctx, ids)
	for _, id := range fenced {
		owner, epoch, found, err := read(id)
		if err != nil {
			return err
		}
		if err := fences[id].Check(id, found, owner, epoch); err != nil {
			return err
		}
	}
	return nil
}

// fencesOf returns ctx's fences and the sessions among ids they name,
// sorted, each once (nil ids: every fenced session). It is the one place
// a SQL write learns its fences.
func fencesOf(ctx context.Context, ids []string) (map[string]store.Fence, []string) {
	fences := store.FencesFrom(ctx)
	if len(fences) == 0 {
		return nil, nil
	}
	var out []string
	if ids == nil {
		for id := range fences {
			out = append(out, id)
		}
	}
	for _, id := range ids {
		if _, ok := fences[id]; ok {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return fences, slices.Compact(out)
}

// leases reads lease rows inside tx for CheckFences. ForShare makes a
// concurrent takeover (an UPDATE of the lease row) wait for tx, or tx see
// the new epoch: a stale owner's write never becomes visible.
func (f *Flavor) leases(ctx context.Context, tx *sql.Tx) LeaseReader {
	return func(id string) (string, int64, bool, error) {
		var owner string
		var epoch int64
		err := tx.QueryRowContext(ctx, `SELECT owner_id, epoch FROM session_leases WHERE session_id = $1`+f.ForShare, id).Scan(&owner, &epoch)
		if errors.Is(err, sql.ErrNoRows) {
			return "", 0, false, nil
		}
		return owner, epoch, err == nil, err
	}
}
