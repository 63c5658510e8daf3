package bench

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// BenchmarkResumeGRPC compares gRPC ResumeSession, over a real gRPC
// connection to the daemon's port, with a raw scan of the same rows, in the
// same run: each iteration reads the whole session each way, alternating
// which goes first; it also times what the WebSocket path does, over gRPC
// (one ResumeSession answer, then Subscribe from its last event). The figures are the best round of each and their ratio
// (raw ÷ gRPC time, as `trellis bench replay` reports grpc_ratio). The
// session holds TRELLIS_BENCH_EVENTS deltas (default 100,000); the daemon
// runs in process unless TRELLIS_BENCH_CHILD is set (then trellisd).
//
//	go test ./bench -run '^$' -bench ResumeGRPC -benchtime 5x
func BenchmarkResumeGRPC(b *testing.B) {
	events := 100_000
	if v := os.Getenv("TRELLIS_BENCH_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		events = n
	}
	ctx := context.Background()
	d := Daemon{}
	if os.Getenv("TRELLIS_BENCH_CHILD") != "" {
		d.Command = []string{trellisd(b)}
	}
	var r Result
	h, driver, err := d.startDrivenMerging(ctx, &r, streamScript(scriptStep{match: "replay", deltas: events}), false)
	if err != nil {
		b.Fatal(err)
	}
	defer h.close()
	sid, err := h.createSession(ctx, driver)
	if err != nil {
		b.Fatal(err)
	}
	if err := runTurn(ctx, h, driver, sid, "replay"); err != nil {
		b.Fatal(err)
	}
	total, err := lastSeq(ctx, driver, sid)
	if err != nil {
		b.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(h.home, sqlite.FileName)+"?_query_only=1&_busy_timeout=10000")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	sessions := trellisv1.NewSessionServiceClient(driver)

	raw := func() time.Duration {
		start := time.Now()
		n, err := rawScan(ctx, db, sid)
		if err != nil || n != total {
			b.Fatalf("raw scan: %d rows of %d: %v", n, total, err)
		}
		return time.Since(start)
	}
	var pages int
	viaGRPC := func() time.Duration {
		start := time.Now()
		var err error
		if pages, err = resumeGRPC(ctx, sessions, sid, total); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	// What the WebSocket path does, over gRPC: one ResumeSession answer,
	// then Subscribe from its last event for the rest, in pages.
	viaSubscribe := func() time.Duration {
		start := time.Now()
		var zero int64
		res, err := sessions.ResumeSession(ctx, &trellisv1.ResumeSessionRequest{SessionId: sid, AfterSeq: &zero})
		if err != nil {
			b.Fatal(err)
		}
		seqs := res.GetEvents().GetSeqs()
		n := int64(len(seqs))
		if n > 0 && seqs[n-1] != n {
			b.Fatalf("ResumeSession: last seq %d of %d events", seqs[n-1], n)
		}
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := sessions.Subscribe(sctx, &trellisv1.SubscribeRequest{SessionId: sid, AfterSeq: n})
		if err != nil {
			b.Fatal(err)
		}
		var objs [][]byte
		for n < total {
			resp, err := stream.Recv()
			if err != nil {
				b.Fatal(err)
			}
			if page := resp.GetEvents(); page != nil {
				if objs, err = codec.PageObjects(page, objs[:0]); err != nil {
					b.Fatal(err)
				}
				for _, seq := range page.GetSeqs() {
					if n++; seq != n {
						b.Fatalf("Subscribe: seq %d at position %d", seq, n)
					}
				}
			}
		}
		return time.Since(start)
	}
	// One round of each before the clock: the first read warms the
	// page cache and the connections.
	raw()
	viaGRPC()
	viaSubscribe()
	var bestRaw, bestGRPC, bestSub time.Duration
	keep := func(best *time.Duration, d time.Duration) {
		if *best == 0 || d < *best {
			*best = d
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			keep(&bestRaw, raw())
			keep(&bestGRPC, viaGRPC())
			keep(&bestSub, viaSubscribe())
		} else {
			keep(&bestSub, viaSubscribe())
			keep(&bestGRPC, viaGRPC())
			keep(&bestRaw, raw())
		}
	}
	b.StopTimer()
	// The fixed cost of one answer: a resume of the last event, 200 times.
	last := total - 1
	start := time.Now()
	for i := 0; i < 200; i++ {
		if _, err := sessions.ResumeSession(ctx, &trellisv1.ResumeSessionRequest{SessionId: sid, AfterSeq: &last}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/200, "µs/1-event-answer")
	b.ReportMetric(float64(bestRaw.Nanoseconds())/float64(total), "raw-ns/event")
	b.ReportMetric(float64(bestGRPC.Nanoseconds())/float64(total), "grpc-ns/event")
	b.ReportMetric(float64(pages), "answers")
	b.ReportMetric(bestRaw.Seconds()/bestGRPC.Seconds(), "grpc/raw")
	b.ReportMetric(bestRaw.Seconds()/bestSub.Seconds(), "resume+subscribe/raw")
}
