package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/store"
)

// toStatus turns a domain error into a gRPC status error with an ErrorInfo
// detail, its gRPC code from errcode's generated table; it is the one place
// where domain errors become gRPC status. Errors without a protocol code are
// internal: their text is logged with an error id and replaced by a message
// that leaks nothing.
func toStatus(ctx context.Context, log *slog.Logger, method string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "the call was cancelled")
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		return status.Error(codes.DeadlineExceeded, "the call's deadline passed")
	}
	var e *errs.Error
	if !errors.As(err, &e) || e.Code == errcode.Internal {
		if store.CannotWrite(err) {
			return cannotWriteStatus(log, method, err)
		}
		if storeBusy(err) {
			return storeBusyStatus(log, method, err)
		}
		return internalStatus(log, method, err)
	}
	code, ok := errcode.GRPC(e.Code)
	if !ok {
		return internalStatus(log, method, fmt.Errorf("unmapped error code %q: %w", e.Code, err))
	}
	return statusWithInfo(codes.Code(code), e.Code, e.Msg, e.Data)
}

// cannotWriteStatus is store_unavailable, saying what a person can do:
// the store refused the write (disk full, read-only) and nothing changed.
func cannotWriteStatus(log *slog.Logger, method string, err error) error {
	id := ids.New("e")
	log.Error("the store cannot write", "errorId", id, "method", method, "err", err)
	return statusWithInfo(codes.Unavailable, errcode.StoreUnavailable,
		"the store cannot write (its disk is full or it is read-only), so nothing was changed; "+
			"free disk space or restore write access, then retry (errorId "+id+")",
		map[string]any{"errorId": id, "retryAfterMs": 1000})
}

// storeBusy reports whether err is SQLite's "database is locked" past its
// busy timeout (SQLITE_BUSY, SQLITE_LOCKED and their extended codes), or
// PostgreSQL's serialization failure (40001), deadlock (40P01) or lock
// wait past lock_timeout (55P03).
func storeBusy(err error) bool {
	if errors.Is(err, store.ErrBusy) {
		return true
	}
	var e *sqlitedrv.Error
	if errors.As(err, &e) {
		c := e.Code() & 0xff
		return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
	}
	_, busy := postgresBusy(err)
	return busy
}

// storeBusyStatus is store_busy with retry advice; the cause goes to the
// log under the error id.
func storeBusyStatus(log *slog.Logger, method string, err error) error {
	id := ids.New("e")
	log.Warn("the store is locked by another writer", "errorId", id, "method", method, "err", err)
	msg := "the store stayed locked by another writer (another process holds the database) past its 10 s wait, so nothing was changed; " +
		"retry in a moment, and if it persists look for another program using the database (errorId " + id + ")"
	if code, ok := postgresBusy(err); ok {
		msg = "the PostgreSQL store could not complete the write (" + code + ": " + pgBusyReason(code) + ") because of concurrent work, so nothing was changed; " +
			"retry in a moment, and if it persists look for long transactions holding locks (pg_stat_activity) (errorId " + id + ")"
	}
	return statusWithInfo(codes.Unavailable, errcode.StoreBusy, msg, map[string]any{"errorId": id, "retryAfterMs": 1000})
}

func pgBusyReason(code string) string {
	switch code {
	case "40001":
		return "serialization failure"
	case "40P01":
		return "deadlock detected"
	}
	return "lock wait past lock_timeout"
}

func internalStatus(log *slog.Logger, method string, err error) error {
	id := ids.New("e")
	log.Error("internal error", "errorId", id, "method", method, "err", err)
	return statusWithInfo(codes.Internal, errcode.Internal,
		"internal error; the daemon log has the details under errorId "+id,
		map[string]any{"errorId": id})
}

// statusWithInfo builds a status carrying ErrorInfo{reason: code}; data
// values are rendered as strings (ErrorInfo metadata is a string map).
func statusWithInfo(c codes.Code, reason, msg string, data map[string]any) error {
	// The message and the metadata travel in the call's trailers, which a
	// client refuses past its header limit: an error that quotes a huge
	// input must not turn into a transport failure (seen as internal).
	st := status.New(c, clipText(msg))
	info := &errdetails.ErrorInfo{Reason: reason, Domain: errcode.Domain}
	if len(data) > 0 {
		info.Metadata = make(map[string]string, len(data))
		for k, v := range data {
			switch v := v.(type) {
			case string:
				info.Metadata[k] = clipText(v)
			case int:
				info.Metadata[k] = strconv.Itoa(v)
			case int64:
				info.Metadata[k] = strconv.FormatInt(v, 10)
			default:
				info.Metadata[k] = clipText(fmt.Sprint(v))
			}
		}
	}
	withInfo, err := st.WithDetails(info)
	if err != nil {
		return st.Err()
	}
	return withInfo.Err()
}

// maxErrorText bounds an error's message and each of its data values.
const maxErrorText = 4096

// clipText cuts s to maxErrorText bytes (on a rune boundary), saying how
// much was left out.
func clipText(s string) string {
	if len(s) <= maxErrorText {
		return s
	}
	cut := maxErrorText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d more bytes cut)", len(s)-cut)
}
