package eventlog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// benchParallelism × GOMAXPROCS goroutines append at once.
const benchParallelism = 16

var benchPayload = json.RawMessage(`{"text":"a chunk of an answer, about this long"}`)

// countingStore counts AppendEvents transactions.
type countingStore struct {
	store.EventStore
	txs, events atomic.Int64
}

func (c *countingStore) AppendEvents(ctx context.Context, w store.Writer, evs []store.Event) error {
	c.txs.Add(1)
	c.events.Add(int64(len(evs)))
	return c.EventStore.AppendEvents(ctx, w, evs)
}

// BenchmarkAppendGroupCommit: many goroutines append through the log, each
// to its own session; the writer commits what is queued in one transaction.
func BenchmarkAppendGroupCommit(b *testing.B) {
	ids := sessionIDs(64)
	st := openStore(b, ids...)
	cs := &countingStore{EventStore: st}
	l := newLog(b, cs)
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := ids[int(next.Add(1))%len(ids)]
		for pb.Next() {
			if _, err := l.Append(ctx, id, "message.delta", benchPayload); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(cs.events.Load())/float64(max(cs.txs.Load(), 1)), "events/tx")
}

// BenchmarkAppendPerEventTx: the same goroutines and store, but each event
// is its own transaction (no log, no grouping).
func BenchmarkAppendPerEventTx(b *testing.B) {
	ids := sessionIDs(64)
	st := openStore(b, ids...)
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine owns a session and numbers its events itself.
		id := fmt.Sprintf("s-bench-%d", next.Add(1))
		if err := st.CreateSession(ctx, store.Session{SessionID: id, Kind: store.KindChat}); err != nil {
			b.Error(err)
			return
		}
		for seq := int64(1); pb.Next(); seq++ {
			ev := store.Event{SessionID: id, Seq: seq, Kind: "message.delta", Payload: benchPayload, TS: time.Now()}
			if err := st.AppendEvents(ctx, store.Unfenced(), []store.Event{ev}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkAppendStalledSubscriber appends to one session from many
// goroutines with no subscriber and with one that never reads: Append must
// not get slower.
func BenchmarkAppendStalledSubscriber(b *testing.B) {
	for _, stalled := range []bool{false, true} {
		name := "none"
		if stalled {
			name = "stalled"
		}
		b.Run(name, func(b *testing.B) {
			st := openStore(b, "s-1")
			l := newLog(b, st)
			ctx := context.Background()
			if stalled {
				sub, err := l.Subscribe(ctx, "s-1", 0)
				if err != nil {
					b.Fatal(err)
				}
				defer sub.Close()
			}
			b.SetParallelism(benchParallelism)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := l.Append(ctx, "s-1", "message.delta", benchPayload); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

const replayEvents = 100_000

var replayFixture struct {
	once sync.Once
	dir  string
	st   *sqlite.Store
	err  error
}

// replayStore is a store holding replayEvents events of session "s-replay",
// built once per test binary.
func replayStore(b *testing.B) *sqlite.Store {
	f := &replayFixture
	f.once.Do(func() {
		if f.dir, f.err = os.MkdirTemp("", "eventlog-bench"); f.err != nil {
			return
		}
		if f.st, f.err = sqlite.Open(filepath.Join(f.dir, sqlite.FileName)); f.err != nil {
			return
		}
		ctx := context.Background()
		if f.err = f.st.CreateSession(ctx, store.Session{SessionID: "s-replay", Kind: store.KindChat}); f.err != nil {
			return
		}
		batch := make([]store.Event, 0, 5000)
		for seq := int64(1); seq <= replayEvents; seq++ {
			batch = append(batch, store.Event{SessionID: "s-replay", Seq: seq, Kind: "message.delta", Payload: benchPayload, TS: time.Now()})
			if len(batch) == cap(batch) {
				if f.err = f.st.AppendEvents(ctx, store.Unfenced(), batch); f.err != nil {
					return
				}
				batch = batch[:0]
			}
		}
	})
	if f.err != nil {
		b.Fatal(f.err)
	}
	return f.st
}

func TestMain(m *testing.M) {
	code := m.Run()
	if f := &replayFixture; f.st != nil {
		f.st.Close()
	}
	if replayFixture.dir != "" {
		os.RemoveAll(replayFixture.dir)
	}
	os.Exit(code)
}

// BenchmarkReplay100k subscribes from 0 to a session of 100,000 stored
// events and reads until CaughtUp.
func BenchmarkReplay100k(b *testing.B) {
	st := replayStore(b)
	l := newLog(b, st)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sub, err := l.Subscribe(ctx, "s-replay", 0)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for it := range sub.Items() {
			if it.CaughtUp {
				break
			}
			n++
		}
		sub.Close()
		if n != replayEvents {
			b.Fatalf("replayed %d events, want %d", n, replayEvents)
		}
	}
}

// BenchmarkReadEvents100k scans the same events with raw ReadEvents calls,
// in pages of the log's default replay size and in one call.
func BenchmarkReadEvents100k(b *testing.B) {
	st := replayStore(b)
	ctx := context.Background()
	for _, page := range []int{512, 0} {
		b.Run(fmt.Sprintf("page=%d", page), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				n, last := 0, int64(0)
				for {
					evs, err := st.ReadEvents(ctx, "s-replay", last, page)
					if err != nil {
						b.Fatal(err)
					}
					if len(evs) == 0 {
						break
					}
					n += len(evs)
					last = evs[len(evs)-1].Seq
				}
				if n != replayEvents {
					b.Fatalf("read %d events, want %d", n, replayEvents)
				}
			}
		})
	}
}

// BenchmarkAppendStreaming: one producer streams a turn's chunks to one
// session the way a session does (Enqueue without waiting, wait on the
// last), so that consecutive chunks share commits.
func BenchmarkAppendStreaming(b *testing.B) {
	ids := sessionIDs(1)
	st := openStore(b, ids...)
	cs := &countingStore{EventStore: st}
	l := newLog(b, cs)
	ctx := context.Background()
	b.ResetTimer()
	var wait func() (store.Event, error)
	for i := 0; i < b.N; i++ {
		var err error
		if wait, err = l.Enqueue(ctx, ids[0], "message.delta", benchPayload); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := wait(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(cs.events.Load())/float64(max(cs.txs.Load(), 1)), "events/tx")
}
