package sqlite

import (
	"bytes"
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"unsafe"

	"github.com/trellis-run/trellis/runtime/store"
)

// ScanEvents reads the session's events after afterSeq, ascending, and
// hands each row to fn (store.EventStore). It reads through the driver
// itself, on a connection of the read pool, with the statement prepared
// on that connection once: the rows' values go into one reused slice,
// with none of database/sql's per-row locking and conversions (the
// driver's own text values are the only allocations). The query runs
// without ctx's end, which would cost the driver a goroutine per query;
// ctx is checked between rows instead.
func (s *Store) ScanEvents(ctx context.Context, sessionID string, afterSeq int64, limit int, fn func(*store.EventRow) error) error {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	conn, err := s.r.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: read events of %s: %w", sessionID, err)
	}
	defer conn.Close()
	var fnErr error
	err = conn.Raw(func(dc any) error {
		st, err := s.scanStmt(dc)
		if err != nil {
			return err
		}
		rows, err := st.QueryContext(context.WithoutCancel(ctx),
			[]driver.NamedValue{{Ordinal: 1, Value: sessionID}, {Ordinal: 2, Value: afterSeq}, {Ordinal: 3, Value: int64(limit)}})
		if err != nil {
			return err
		}
		defer rows.Close()
		var (
			row  store.EventRow
			dest = make([]driver.Value, 1)
		)
		for n := 1; ; n++ {
			if err := rows.Next(dest); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
			if !scanEventRow(&row, textBytes(dest[0])) {
				return fmt.Errorf("unreadable event row %.64q", textBytes(dest[0]))
			}
			if fnErr = fn(&row); fnErr != nil {
				return fnErr
			}
			if n%256 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("sqlite: read events of %s: %w", sessionID, err)
	}
	return nil
}

// scanQuery is ScanEvents' query. Its one text column per row,
// "seq,ts,kind\x00payload": the driver takes a lock and a type check for
// every column it hands over, which together cost more than SQLite's own
// work on the row: one column reads a session in about 0.7 of the time a
// database/sql scan of the four takes (BenchmarkScanEvents). A valid JSON
// payload holds no NUL byte, so the last NUL ends the kind, whatever the
// kind holds.
const scanQuery = `SELECT seq || ',' || ts || ',' || kind || char(0) || payload FROM events
	WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?`

// scanStmt returns scanQuery prepared on the read connection dc, preparing
// it the first time. Only the caller holding dc (conn.Raw) uses it.
func (s *Store) scanStmt(dc any) (driver.StmtQueryContext, error) {
	if st, ok := s.scans.Load(dc); ok {
		return st.(driver.StmtQueryContext), nil
	}
	p, ok := dc.(driver.ConnPrepareContext)
	if !ok {
		return nil, fmt.Errorf("the driver connection %T cannot prepare", dc)
	}
	st, err := p.PrepareContext(context.Background(), scanQuery)
	if err != nil {
		return nil, err
	}
	q, ok := st.(driver.StmtQueryContext)
	if !ok {
		st.Close()
		return nil, fmt.Errorf("the driver statement %T cannot query", st)
	}
	s.scans.Store(dc, q)
	return q, nil
}

// scanEventRow reads a row of ScanEvents' query, "seq,ts,kind\x00payload",
// into r, pointing into b.
func scanEventRow(r *store.EventRow, b []byte) bool {
	seq, rest, ok := cutInt(b)
	if !ok {
		return false
	}
	ts, rest, ok := cutInt(rest)
	if !ok {
		return false
	}
	i := bytes.LastIndexByte(rest, 0)
	if i < 0 {
		return false
	}
	r.Seq, r.TS, r.Kind, r.Payload = seq, fromMicros(ts), rest[:i], rest[i+1:]
	return true
}

// cutInt reads a decimal integer (an optional minus, then at most 18
// digits) up to a comma, and returns it and what follows the comma.
func cutInt(b []byte) (int64, []byte, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	var v int64
	k := 0
	for ; k < len(b) && b[k] >= '0' && b[k] <= '9'; k++ {
		if k == 18 {
			return 0, nil, false
		}
		v = v*10 + int64(b[k]-'0')
	}
	if k == 0 || k == len(b) || b[k] != ',' {
		return 0, nil, false
	}
	if neg {
		v = -v
	}
	return v, b[k+1:], true
}

// textBytes is a TEXT or BLOB value of the driver as bytes, read-only: a
// string (the driver's own copy of the column, new for each row) is viewed
// in place rather than copied.
func textBytes(v driver.Value) []byte {
	switch v := v.(type) {
	case string:
		return unsafe.Slice(unsafe.StringData(v), len(v))
	case []byte:
		return v
	}
	return nil
}
