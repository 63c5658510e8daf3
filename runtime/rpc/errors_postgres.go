//go:build !trellis_lean

package rpc

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// postgresBusy returns the SQLSTATE of a PostgreSQL error that means
// concurrent work stopped the write (serialization failure, deadlock, lock
// not available), and whether err is one.
func postgresBusy(err error) (string, bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01", "55P03":
			return pe.Code, true
		}
	}
	return "", false
}
