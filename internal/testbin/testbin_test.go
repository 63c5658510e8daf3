package testbin

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestEnvironmentNamesAPrebuiltBinary(t *testing.T) {
	t.Setenv("TESTBIN_TEST_BIN", "/opt/prebuilt/x")
	p, err := Path(Binary{Name: "x", Pkg: "github.com/trellis-run/trellis/cmd/nothing-here", Env: "TESTBIN_TEST_BIN"})
	if err != nil || p != "/opt/prebuilt/x" {
		t.Fatalf("Path = %q, %v; want the prebuilt binary", p, err)
	}
}

func TestContentKeyFollowsTheLinkedPackages(t *testing.T) {
	a1, err := contentKey("github.com/trellis-run/trellis/internal/atomicfile")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := contentKey("github.com/trellis-run/trellis/internal/atomicfile")
	if err != nil {
		t.Fatal(err)
	}
	// daemonfile links atomicfile and more: another set, another key.
	b, err := contentKey("github.com/trellis-run/trellis/daemonfile")
	if err != nil {
		t.Fatal(err)
	}
	if a1 != a2 || a1 == b || len(a1) != 16 {
		t.Fatalf("keys %s, %s (same package) and %s (another): want equal, equal, different", a1, a2, b)
	}
	if _, err := contentKey("github.com/trellis-run/trellis/no/such/package"); err == nil {
		t.Fatal("no error for a package that does not exist")
	}
}

// TestCleanupKeepsHeldBinaries: the cleanup keeps the keep most recently
// used binaries and removes older ones, but not one a process holds (a
// test process still running it).
func TestCleanupKeepsHeldBinaries(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	var paths []string
	for i := range keep + 3 {
		p := filepath.Join(dir, fmt.Sprintf("trellisd-%02d", i))
		if err := os.WriteFile(p, []byte("bin"), 0o700); err != nil {
			t.Fatal(err)
		}
		used := now.Add(-time.Duration(i) * time.Minute) // 0 newest
		if err := os.Chtimes(p, used, used); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	oldest := paths[len(paths)-1]
	if err := hold(oldest); err != nil {
		t.Fatal(err)
	}
	removeUnused(dir, now)
	for i, p := range paths {
		_, err := os.Stat(p)
		switch want := i < keep || p == oldest; {
		case want && err != nil:
			t.Errorf("%s removed: %v", filepath.Base(p), err)
		case !want && err == nil:
			t.Errorf("%s kept, want it removed (not among the %d most recent, not held)", filepath.Base(p), keep)
		}
	}
}
