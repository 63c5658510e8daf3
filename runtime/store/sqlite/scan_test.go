package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

// TestScanEventRow: the row text of ScanEvents' query, read back; a kind
// may hold commas and NUL bytes (the last NUL ends it), a time may be
// before 1970, and anything else is refused.
func TestScanEventRow(t *testing.T) {
	for _, tc := range []struct {
		name, row string
		seq, ts   int64
		kind      string
		payload   string
		ok        bool
	}{
		{"plain", "7,1764612345123456,message.delta\x00{\"text\":\"a,b\"}", 7, 1764612345123456, "message.delta", `{"text":"a,b"}`, true},
		{"null payload", "1,0,turn.done\x00null", 1, 0, "turn.done", "null", true},
		{"before 1970", "2,-5000000,k\x00{}", 2, -5000000, "k", "{}", true},
		{"kind with commas and NUL", "3,10,a,b\x00c\x00[1]", 3, 10, "a,b\x00c", "[1]", true},
		{"largest seq", "999999999999999999,1,k\x00{}", 999999999999999999, 1, "k", "{}", true},
		{"seq too long", "1000000000000000000,1,k\x00{}", 0, 0, "", "", false},
		{"no seq", ",1,k\x00{}", 0, 0, "", "", false},
		{"no ts", "1,k\x00{}", 0, 0, "", "", false},
		{"no NUL", "1,2,k{}", 0, 0, "", "", false},
		{"minus alone", "-,2,k\x00{}", 0, 0, "", "", false},
		{"empty", "", 0, 0, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r store.EventRow
			ok := scanEventRow(&r, []byte(tc.row))
			if ok != tc.ok {
				t.Fatalf("scanEventRow(%q) ok = %v, want %v", tc.row, ok, tc.ok)
			}
			if !ok {
				return
			}
			if r.Seq != tc.seq || r.TS.UnixMicro() != tc.ts || string(r.Kind) != tc.kind || string(r.Payload) != tc.payload {
				t.Errorf("scanEventRow(%q) = %d %d %q %q", tc.row, r.Seq, r.TS.UnixMicro(), r.Kind, r.Payload)
			}
		})
	}
}

// FuzzScanEventRow: any text is read without a panic, and a row made of
// values is read back as those values.
func FuzzScanEventRow(f *testing.F) {
	f.Add(int64(1), int64(1764612345123456), "message.delta", `{"text":"x"}`, []byte("1,2,k\x00{}"))
	f.Add(int64(999999999999999999), int64(-1), "a,b\x00", `null`, []byte("-1,-1,\x00"))
	f.Fuzz(func(t *testing.T, seq, ts int64, kind, payload string, junk []byte) {
		var r store.EventRow
		scanEventRow(&r, junk)
		if seq < 0 || seq > 999999999999999999 || ts < -999999999999999999 || ts > 999999999999999999 || json.Valid([]byte(payload)) == false {
			return
		}
		row := strconv.FormatInt(seq, 10) + "," + strconv.FormatInt(ts, 10) + "," + kind + "\x00" + payload
		if !scanEventRow(&r, []byte(row)) {
			t.Fatalf("scanEventRow(%q) failed", row)
		}
		if r.Seq != seq || r.TS.UnixMicro() != ts || string(r.Kind) != kind || string(r.Payload) != payload {
			t.Errorf("scanEventRow(%q) = %d %d %q %q", row, r.Seq, r.TS.UnixMicro(), r.Kind, r.Payload)
		}
	})
}

// BenchmarkScanEvents reads one session's 20,000 events with ScanEvents
// (one text column per row) and with a plain database/sql scan of the
// four columns (what ScanEvents read before). ns/op is per event.
func BenchmarkScanEvents(b *testing.B) {
	const n = 20_000
	path := filepath.Join(b.TempDir(), FileName)
	s := withSessionAt(b, path)
	ctx := context.Background()
	ts := time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)
	for first := 1; first <= n; first += 1000 {
		var evs []store.Event
		for i := first; i < first+1000; i++ {
			evs = append(evs, store.Event{SessionID: "s-1", Seq: int64(i), Kind: "message.delta",
				Payload: json.RawMessage(fmt.Sprintf(`{"text":"chunk %d of the answer "}`, i)), TS: ts.Add(time.Duration(i) * time.Millisecond)})
		}
		if err := s.AppendEvents(ctx, store.Unfenced(), evs); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("ScanEvents", func(b *testing.B) {
		for b.Loop() {
			got := 0
			if err := s.ScanEvents(ctx, "s-1", 0, 0, func(r *store.EventRow) error { got++; return nil }); err != nil || got != n {
				b.Fatalf("%d rows: %v", got, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
	})
	b.Run("database-sql-4-columns", func(b *testing.B) {
		db, err := sql.Open("sqlite", path+"?_query_only=1")
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		for b.Loop() {
			rows, err := db.QueryContext(ctx, `SELECT seq, kind, payload, ts FROM events WHERE session_id = ? AND seq > 0 ORDER BY seq`, "s-1")
			if err != nil {
				b.Fatal(err)
			}
			var (
				seq, ts int64
				kind    string
				payload []byte
			)
			got := 0
			for rows.Next() {
				if err := rows.Scan(&seq, &kind, &payload, &ts); err != nil {
					b.Fatal(err)
				}
				got++
			}
			rows.Close()
			if got != n {
				b.Fatalf("%d rows", got)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
	})
}
