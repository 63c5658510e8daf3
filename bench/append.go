package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// AppendOptions configure Append. It needs no daemon: it drives
// runtime/eventlog over a SQLite store of its own.
type AppendOptions struct {
	// Dir holds the bench's database files ("" = a temporary directory,
	// removed afterwards). Put it on the disk the daemon's home is on.
	Dir string
	// Events is how many events the group-commit and bulk runs append
	// (default 100,000).
	Events int
	// BaselineEvents is how many events the one-transaction-per-event run
	// appends (default 2,000; each waits for its own fsync).
	BaselineEvents int
	// Writers is how many goroutines call Log.Append at once in the
	// group-commit run, each on its own session (default 64).
	Writers int
	// BulkBatch is how many events one raw bulk transaction holds
	// (default 10,000).
	BulkBatch int
	// Rounds repeats the four runs, interleaved so that each round's runs
	// share the disk's state; figures are medians over rounds, ratios the
	// medians of each round's ratio (default 3).
	Rounds int
	// Progress receives a line per phase; nil discards them.
	Progress io.Writer
}

func (o *AppendOptions) defaults() {
	orDefault(&o.Events, 100_000)
	orDefault(&o.BaselineEvents, 2_000)
	orDefault(&o.Writers, 64)
	orDefault(&o.BulkBatch, 10_000)
	orDefault(&o.Rounds, 3)
}

// deltaPayload is the payload of a typical message.delta.
var deltaPayload = json.RawMessage(`{"text":"a chunk of an answer, about this long"}`)

// Append measures the event log's durable append throughput: Writers
// goroutines calling Log.Append at once (their events share group commits)
// against one goroutine calling it once at a time (one transaction, one
// fsync, per event), and against the store's physical limit, a raw
// store.AppendEvents of BulkBatch events per transaction. A fourth run shows
// the streaming path of a turn: one producer per session enqueueing without
// waiting (Log.Enqueue), then waiting for its last event. Each run gets a
// fresh database file in Dir.
func Append(ctx context.Context, opts AppendOptions) (Result, error) {
	opts.defaults()
	r := Result{Bench: "append", Title: "event-log append: group commit vs one transaction per event vs raw bulk insert",
		Params: []Param{{"events", opts.Events}, {"baseline_events", opts.BaselineEvents},
			{"writers", opts.Writers}, {"bulk_batch", opts.BulkBatch}, {"rounds", opts.Rounds}}}
	dir := opts.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "trellis-bench-append-")
		if err != nil {
			return r, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	logf := func(format string, args ...any) {
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, format+"\n", args...)
		}
	}
	run := 0
	fresh := func(sessions int) (*countingStore, func(), error) {
		run++
		path := filepath.Join(dir, fmt.Sprintf("append-%d.db", run))
		st, err := sqlite.Open(path)
		if err != nil {
			return nil, nil, err
		}
		for i := 0; i < sessions; i++ {
			if err := st.CreateSession(ctx, store.Session{SessionID: benchSessionID(i), Kind: store.KindChat, CreatedAt: time.Now()}); err != nil {
				st.Close()
				return nil, nil, err
			}
		}
		cleanup := func() {
			st.Close()
			for _, suffix := range []string{"", "-wal", "-shm"} {
				os.Remove(path + suffix)
			}
		}
		return &countingStore{EventStore: st}, cleanup, nil
	}

	var perEvent, group, perTx, stream, streamPerTx, bulk, groupRatio, groupRaw, streamRaw []float64
	for round := 1; round <= opts.Rounds; round++ {
		logf("append round %d: %d events, one Append at a time", round, opts.BaselineEvents)
		pe, _, err := appendRun(fresh, 1, opts.BaselineEvents, false)
		if err != nil {
			return r, err
		}
		logf("append round %d: %d events from %d goroutines", round, opts.Events, opts.Writers)
		g, gtx, err := appendRun(fresh, opts.Writers, opts.Events, false)
		if err != nil {
			return r, err
		}
		logf("append round %d: %d events streamed by %d sessions (Enqueue)", round, opts.Events, opts.Writers)
		st, stx, err := appendRun(fresh, opts.Writers, opts.Events, true)
		if err != nil {
			return r, err
		}
		logf("append round %d: %d events in raw bulk transactions of %d", round, opts.Events, opts.BulkBatch)
		b, err := bulkRun(ctx, fresh, opts.Events, opts.BulkBatch)
		if err != nil {
			return r, err
		}
		perEvent, group, perTx = append(perEvent, pe), append(group, g), append(perTx, gtx)
		stream, streamPerTx, bulk = append(stream, st), append(streamPerTx, stx), append(bulk, b)
		groupRatio = append(groupRatio, ratio(g, pe))
		groupRaw, streamRaw = append(groupRaw, ratio(g, b)), append(streamRaw, ratio(st, b))
	}

	r.figure("per_event_tx_events_per_s", median(perEvent), "events/s", "one Append at a time (tx per event)")
	r.figure("group_commit_events_per_s", median(group), "events/s", fmt.Sprintf("Append from %d goroutines (group commit)", opts.Writers))
	r.figure("group_commit_events_per_tx", median(perTx), "events/tx", "group commit: events per transaction")
	r.figure("enqueue_events_per_s", median(stream), "events/s", fmt.Sprintf("Enqueue by %d streaming sessions", opts.Writers))
	r.figure("enqueue_events_per_tx", median(streamPerTx), "events/tx", "streaming: events per transaction")
	r.figure("raw_bulk_events_per_s", median(bulk), "events/s", "raw store.AppendEvents bulk insert")
	r.figure("group_vs_per_event", median(groupRatio), "×", "group commit / tx per event")
	r.figure("group_vs_raw", median(groupRaw), "ratio", "group commit / raw bulk")
	r.figure("enqueue_vs_raw", median(streamRaw), "ratio", "streaming / raw bulk")
	r.target("group_vs_per_event", ">=", 10)
	r.note("SQLite in WAL mode with synchronous=FULL: every transaction is an fsync of %s", dir)
	r.finish()
	return r, nil
}

// countingStore counts the transactions and events of AppendEvents.
type countingStore struct {
	store.EventStore
	txs, events atomic.Int64
}

func (c *countingStore) AppendEvents(ctx context.Context, w store.Writer, evs []store.Event) error {
	c.txs.Add(1)
	c.events.Add(int64(len(evs)))
	return c.EventStore.AppendEvents(ctx, w, evs)
}

func benchSessionID(i int) string { return fmt.Sprintf("s-bench%06d", i) }

// appendRun appends total events through an event log from writers
// goroutines, each on its own session, and returns events/s and events per
// transaction. With enqueue each goroutine queues its events without
// waiting and waits for its last one, as a streaming turn does.
func appendRun(fresh func(int) (*countingStore, func(), error), writers, total int, enqueue bool) (float64, float64, error) {
	st, cleanup, err := fresh(writers)
	if err != nil {
		return 0, 0, err
	}
	defer cleanup()
	l := eventlog.New(st)
	defer l.Close()
	ctx := context.Background()
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < writers; w++ {
		n := total / writers
		if w < total%writers {
			n++
		}
		wg.Add(1)
		go func(id string, n int) {
			defer wg.Done()
			var wait func() (store.Event, error)
			for i := 0; i < n; i++ {
				var err error
				if enqueue {
					wait, err = l.Enqueue(ctx, id, eventkind.MessageDelta, deltaPayload)
				} else {
					_, err = l.Append(ctx, id, eventkind.MessageDelta, deltaPayload)
				}
				if err != nil {
					failed.Store(err)
					return
				}
			}
			if wait != nil {
				if _, err := wait(); err != nil {
					failed.Store(err)
				}
			}
		}(benchSessionID(w), n)
	}
	wg.Wait()
	took := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		return 0, 0, err
	}
	if got := st.events.Load(); got != int64(total) {
		return 0, 0, fmt.Errorf("bench: appended %d events, stored %d", total, got)
	}
	return rate(int64(total), took), ratio(float64(st.events.Load()), float64(st.txs.Load())), nil
}

// bulkRun inserts total events with store.AppendEvents, batch per
// transaction, seqs numbered by hand: the store's physical limit.
func bulkRun(ctx context.Context, fresh func(int) (*countingStore, func(), error), total, batch int) (float64, error) {
	st, cleanup, err := fresh(1)
	if err != nil {
		return 0, err
	}
	defer cleanup()
	id := benchSessionID(0)
	evs := make([]store.Event, 0, batch)
	now := time.Now()
	start := time.Now()
	for seq := 1; seq <= total; seq++ {
		evs = append(evs, store.Event{SessionID: id, Seq: int64(seq), Kind: eventkind.MessageDelta, Payload: deltaPayload, TS: now})
		if len(evs) == batch || seq == total {
			if err := st.AppendEvents(ctx, store.Unfenced(), evs); err != nil {
				return 0, err
			}
			evs = evs[:0]
		}
	}
	return rate(int64(total), time.Since(start)), nil
}
