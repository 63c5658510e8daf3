package sqlstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/trellis-run/trellis/runtime/store"
)

// LeaseReader reads a lease row (by its key, a session id) inside the
// writing transaction; found is false when the key has none.
type LeaseReader func(key string) (owner string, epoch int64, found bool, err error)

// CheckFences verifies, through read inside the writing transaction, that
// the lease row of each fence's key still has the fence's owner and epoch
// (store.ErrLeaseLost otherwise). Every fenced SQL write of both backends
// checks through it.
func CheckFences(fences []store.Fence, read LeaseReader) error {
	for _, f := range fences {
		owner, epoch, found, err := read(f.Key)
		if err != nil {
			return err
		}
		if err := f.Check(found, owner, epoch); err != nil {
			return err
		}
	}
	return nil
}

// fencesOf returns the fences a write of the rows of ids checks under w,
// one per key in key order (nil ids: a write not keyed by session, a
// setting, checks every fence of w); a session w has no fence on refuses
// the write (store.Writer.FencesOf). It is the one place a SQL write
// learns its fences.
func fencesOf(w store.Writer, ids []string) ([]store.Fence, error) {
	if ids == nil {
		return w.AllFences()
	}
	return w.FencesOf(ids)
}

// leases reads lease rows inside tx for CheckFences. ForShare makes a
// concurrent takeover (an UPDATE of the lease row) wait for tx, or tx see
// the new epoch: a stale owner's write never becomes visible.
func (f *Flavor) leases(ctx context.Context, tx Tx) LeaseReader {
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
