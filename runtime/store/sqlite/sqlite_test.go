package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/conformance"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) store.Store {
		st, err := sqlite.Open(filepath.Join(t.TempDir(), sqlite.FileName))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	})
}
