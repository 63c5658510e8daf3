//go:build trellis_lean

package rpc

// postgresBusy of a lean build (-tags trellis_lean), which has no
// PostgreSQL driver: no error is a PostgreSQL one.
func postgresBusy(error) (string, bool) { return "", false }
