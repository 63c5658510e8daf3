package sqlite

import (
	"testing"

	"github.com/trellis-run/trellis/runtime/store/conformance"
)

// TestMigrationsOnlyAdd: no migration breaks the daemons of the previous
// build still running during a rolling upgrade.
func TestMigrationsOnlyAdd(t *testing.T) {
	conformance.MigrationsOnlyAdd(t, migrationFS, "migrations")
}
