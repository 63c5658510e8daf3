package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestQuickCheckRefusesAnEmptyFile: a missing file passes (the daemon
// creates it), a store Open made passes, a 0-byte file is refused with a
// message naming the file and what to do.
func TestQuickCheckRefusesAnEmptyFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	if err := QuickCheck(ctx, missing); err != nil {
		t.Errorf("missing file: %v", err)
	}
	made := filepath.Join(dir, "made.db")
	st, err := Open(made)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := QuickCheck(ctx, made); err != nil {
		t.Errorf("a store Open made: %v", err)
	}
	empty := filepath.Join(dir, "trellis.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err = QuickCheck(ctx, empty)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("0-byte file: %v, want ErrCorrupt", err)
	}
	for _, want := range []string{empty, "empty (0 bytes)", "will not start", "rm " + empty} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
}
