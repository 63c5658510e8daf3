package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunExitsOneWhenTheDiskFills: the daemon's home is a small tmpfs that
// fills up in the middle of `trellis run`'s turn: the command prints the
// store_unavailable error and exits 1 instead of waiting forever.
func TestRunExitsOneWhenTheDiskFills(t *testing.T) {
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v %s", err, out)
	}
	t.Cleanup(func() {
		if exec.Command("umount", mnt).Run() != nil {
			_ = exec.Command("umount", "-l", mnt).Run()
		}
	})
	e := newEnv(t) // registered after the mount: its daemon stops before the unmount
	e.home = filepath.Join(mnt, "home")
	filler := filepath.Join(mnt, "filler")
	t.Cleanup(func() { os.Remove(filler) }) // room for trellis stop

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := e.command(ctx, "run", "--output", "events", "paced")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	var evs []map[string]any
	deltas := 0
	for lines.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
			t.Fatalf("not JSON: %q", lines.Text())
		}
		evs = append(evs, ev)
		if ev["kind"] == "message.delta" {
			if deltas++; deltas == 3 {
				fill(t, filler)
			}
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitFailed {
		t.Fatalf("exit %v, want %d; stderr %s", err, exitFailed, stderr.String())
	}
	if deltas < 3 {
		t.Fatalf("the turn ended after %d deltas, before the disk was filled", deltas)
	}
	last := evs[len(evs)-1]
	if last["kind"] != "turn.done" || last["payload"].(map[string]any)["reason"] != "error" {
		t.Errorf("last event %v, want turn.done{error}", last)
	}
	var sawError bool
	for _, ev := range evs {
		if ev["kind"] == "error" && ev["payload"].(map[string]any)["code"] == "store_unavailable" {
			sawError = true
		}
	}
	if !sawError || !strings.Contains(stderr.String(), "store cannot write") {
		t.Errorf("no store_unavailable error (in the events: %v); stderr:\n%s", sawError, stderr.String())
	}
}

// fill writes path until its file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for _, n := range []int{len(chunk), 512} {
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(fmt.Errorf("filling %s: %w", path, err))
				}
				break
			}
		}
	}
}
