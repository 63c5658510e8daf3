package tool

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPruneOutputs: files past the age go, then the oldest until the rest
// fit; emptied session directories go; the newest stay.
func TestPruneOutputs(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	write := func(name string, size int, age time.Duration) string {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, now.Add(-age), now.Add(-age))
		return p
	}
	ancient := write("s1/shell-a.log", 10, 30*24*time.Hour)
	old := write("s2/shell-b.log", 400, 3*time.Hour)
	mid := write("s2/shell-c.log", 400, 2*time.Hour)
	recent := write("s3/shell-d.log", 400, time.Hour)
	removed, freed, err := PruneOutputs(dir, OutputRetention{MaxAge: 7 * 24 * time.Hour, MaxBytes: 900}, now)
	if err != nil {
		t.Fatal(err)
	}
	if removed != 2 || freed != 410 {
		t.Errorf("removed %d files, %d bytes; want 2, 410", removed, freed)
	}
	for p, want := range map[string]bool{ancient: false, old: false, mid: true, recent: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s kept=%v, want %v", p, err == nil, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "s1")); err == nil {
		t.Error("the emptied session directory s1 is left")
	}
	// Nothing to do: nothing removed; a missing directory is no error.
	if n, _, err := PruneOutputs(dir, OutputRetention{MaxAge: 7 * 24 * time.Hour, MaxBytes: 900}, now); n != 0 || err != nil {
		t.Errorf("second pass removed %d (%v)", n, err)
	}
	if _, _, err := PruneOutputs(filepath.Join(dir, "none"), OutputRetention{MaxAge: time.Hour}, now); err != nil {
		t.Error(err)
	}
}
