// Package clustertest deposes a daemon from a lease in the tests of what
// a deposed daemon must not do, in the two ways it happens: another daemon
// took the lease over while the holder, stalled, still believes it holds
// it; or the holder's own clock says its lease ran past its renewal.
package clustertest

import (
	"context"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TakeOver ends lease key at the database on dsn and has b take it, while
// a (which holds it, and renews nothing) goes on believing it holds it.
// It reports failures with t.Error: it may run on a goroutine of the code
// under test.
func TakeOver(t testing.TB, dsn string, a, b *cluster.Node, key string) {
	if err := pgtest.ExpireLease(context.Background(), dsn, key); err != nil {
		t.Error(err)
	}
	if got, err := b.AcquireResource(context.Background(), key, nil); err != nil || !got {
		t.Errorf("daemon B takes %s over: %v %v", key, got, err)
	}
	if !a.Holds(key) {
		t.Error("A noticed the takeover: the case needs a stale daemon")
	}
}

// PastMargin returns once a's own clock says its lease key ran past its
// renewal (a does not renew: its node is not started).
func PastMargin(a *cluster.Node, key string) {
	for a.Holds(key) {
		time.Sleep(10 * time.Millisecond) // until a's clock says so
	}
}
