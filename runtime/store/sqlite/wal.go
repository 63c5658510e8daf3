package sqlite

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"time"
)

// walEvery is how long the copier lets commits gather in the log before
// it copies them: at most this often, and only after a write.
const walEvery = 200 * time.Millisecond

// walCopier copies the write-ahead log into the database file (a passive
// WAL checkpoint) on a connection of its own, beside the writes. SQLite
// would otherwise run that copy inside the commit that takes the log past
// 1,000 pages: that commit would read back and write again every page the
// log holds and fsync the file, ten times the cost of a commit of a
// megabyte (docs/performance.md). A passive checkpoint waits for no lock:
// commits and reads go on while it copies the log. When commits added to
// the log meanwhile, it copies those in its turn on the write connection
// (slot), so that the log is wholly copied and the next commit starts it
// again from its beginning: under a stream of commits the log would
// otherwise only grow.
type walCopier struct {
	db    *sql.DB
	slot  chan struct{} // the store's turn on the write connection
	dirty atomic.Bool
	wake  chan struct{}
	stop  chan struct{}
	done  sync.WaitGroup
}

func newWALCopier(path, params string, slot chan struct{}) (*walCopier, error) {
	db, err := sql.Open("sqlite", path+"?"+params)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1) // and kept open: database/sql keeps two idle
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, err
	}
	c := &walCopier{db: db, slot: slot, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	c.done.Add(1)
	go c.run()
	return c, nil
}

// wrote tells the copier that a write transaction ended.
func (c *walCopier) wrote() {
	if !c.dirty.Load() && c.dirty.CompareAndSwap(false, true) {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

func (c *walCopier) run() {
	defer c.done.Done()
	t := time.NewTimer(walEvery)
	t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.wake:
		}
		t.Reset(walEvery)
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-t.C:
		}
		c.dirty.Store(false)
		// An error (the disk, another process's exclusive lock) leaves the
		// log as it is; the next write wakes the copier again, and the
		// last connection to close copies the rest.
		if whole, err := c.copy(); err != nil || whole {
			continue
		}
		select {
		case <-c.stop:
			return
		case c.slot <- struct{}{}:
		}
		_, _ = c.copy()
		<-c.slot
	}
}

// copy copies what it can of the log; whole: all of it.
func (c *walCopier) copy() (whole bool, err error) {
	var busy, frames, copied int
	err = c.db.QueryRowContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied)
	return err == nil && copied == frames, err
}

func (c *walCopier) close() error {
	close(c.stop)
	c.done.Wait()
	return c.db.Close()
}
