package daemon

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestKeptOutputsArePruned: kept command outputs past the retention go
// when the daemon starts, and those that age past it later go while it
// runs; recent ones stay.
func TestKeptOutputsArePruned(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", "")
	home := t.TempDir()
	write := func(name string, age time.Duration) string {
		p := filepath.Join(OutputsDir(home), name)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte("output"), 0o600); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		os.Chtimes(p, at, at)
		return p
	}
	old := write("s1/shell-old.log", 30*24*time.Hour)
	recent := write("s2/shell-recent.log", time.Minute)
	d, err := Start(context.Background(), Config{Home: home, Provider: "fake", OutputPruneEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	if _, err := os.Stat(old); err == nil {
		t.Error("an output older than the default 7 days survived the start")
	}
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("a recent output was pruned: %v", err)
	}
	// Aged past the retention while the daemon runs: the periodic pass
	// takes it. (Beside the recent output: a directory of its own would
	// be empty, and pruned, between its making and the write.)
	later := write("s2/shell-later.log", 8*24*time.Hour)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(later); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an output past the retention was still there 10 s later")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("a recent output was pruned: %v", err)
	}
}
