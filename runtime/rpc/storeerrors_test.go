package rpc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trellis-run/trellis/runtime/store"
)

// TestStoreFailuresHaveTheirCodes: PostgreSQL's serialization failure,
// deadlock and lock timeout are store_busy with retry advice; a write the
// store refuses for lack of space or permission is store_unavailable.
func TestStoreFailuresHaveTheirCodes(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		err    error
		reason string
		msg    string
	}{
		{fmt.Errorf("postgres: append: %w", &pgconn.PgError{Code: "40001", Message: "could not serialize access"}), "store_busy", "serialization failure"},
		{fmt.Errorf("postgres: tx: %w", &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}), "store_busy", "deadlock"},
		{fmt.Errorf("postgres: update: %w", &pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"}), "store_busy", "lock_timeout"},
		{fmt.Errorf("sqlite: %w", fmt.Errorf("%w: %w", store.ErrCannotWrite, syscall.ENOSPC)), "store_unavailable", "disk is full"},
	} {
		st, _ := status.FromError(toStatus(context.Background(), log, "/x/Y", tc.err))
		var info *errdetails.ErrorInfo
		for _, d := range st.Details() {
			if ei, ok := d.(*errdetails.ErrorInfo); ok {
				info = ei
			}
		}
		if st.Code() != codes.Unavailable || info == nil || info.GetReason() != tc.reason || info.GetMetadata()["retryAfterMs"] != "1000" ||
			!strings.Contains(st.Message(), tc.msg) || !strings.Contains(st.Message(), "retry") {
			t.Errorf("%v → %v %q %v", tc.err, st.Code(), st.Message(), info)
		}
	}
}
