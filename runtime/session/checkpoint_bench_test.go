package session

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// BenchmarkCheckpointWrite is the cost of one write tool call's checkpoint
// as `trellis bench checkpoint` measures it (docs/performance.md): a 1 MiB
// change of fresh random bytes over one file of a workdir holding 200
// other 4 KiB files, recorded on SQLite with the daemon's defaults
// (synchronous commits), and with --durability batch.
func BenchmarkCheckpointWrite(b *testing.B) {
	b.Run("sync", func(b *testing.B) { benchCheckpointWrite(b) })
	b.Run("batch", func(b *testing.B) { benchCheckpointWrite(b, sqlite.WithBatchDurability()) })
}

func benchCheckpointWrite(b *testing.B, opts ...sqlite.Option) {
	ctx := context.Background()
	home := b.TempDir()
	st, err := sqlite.Open(filepath.Join(home, "t.db"), opts...)
	if err != nil {
		b.Fatal(err)
	}
	log := eventlog.New(st)
	closed := false
	defer func() {
		if !closed {
			log.Close()
			st.Close()
		}
	}()
	s := &Service{deps: Deps{Store: st, Events: log, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Checkpoints: CheckpointSettings{Enabled: true, MaxFile: 10 << 20, Quota: 1 << 30}}}
	wd := filepath.Join(home, "wd")
	os.MkdirAll(wd, 0o755)
	small := make([]byte, 4<<10)
	old := time.Now().Add(-time.Hour) // untouched files: known by size and time
	for i := range 200 {
		rand.Read(small)
		p := filepath.Join(wd, fmt.Sprintf("f%03d", i))
		if err := os.WriteFile(p, small, 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			b.Fatal(err)
		}
	}
	row := store.Session{SessionID: "s-bench", Workdir: wd, Mode: "auto", Kind: store.KindChat, CreatedAt: time.Now()}
	if err := st.CreateSession(ctx, row); err != nil {
		b.Fatal(err)
	}
	big := make([]byte, 1<<20)
	if _, _, err := s.record(ctx, row, recording{reason: store.CheckpointTurn}); err != nil {
		b.Fatal(err)
	}
	start, workdir := writtenBytes(b), int64(0)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		rand.Read(big)
		before := writtenBytes(b)
		if err := os.WriteFile(filepath.Join(wd, "big"), big, 0o644); err != nil {
			b.Fatal(err)
		}
		workdir += writtenBytes(b) - before
		b.StartTimer()
		if _, _, err := s.record(ctx, row, recording{reason: store.CheckpointTool}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	closed = true
	log.Close()
	if err := st.Close(); err != nil { // copies what is left of the write-ahead log
		b.Fatal(err)
	}
	b.ReportMetric(float64(writtenBytes(b)-start-workdir)/float64(b.N), "disk-B/op")
}

// writtenBytes is what the process has sent to the disk so far (Linux's
// write_bytes; 0 elsewhere): a checkpoint's store writes, the database's
// log and its copy into the database file included.
func writtenBytes(b *testing.B) int64 {
	raw, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	return 0
}
