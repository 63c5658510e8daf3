package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
)

func TestSeekLastLines(t *testing.T) {
	big := strings.Repeat("y", 70<<10) // longer than one read block
	for _, tc := range []struct {
		name, text string
		n          int
		want       string
	}{
		{"last two", "a\nb\nc\n", 2, "b\nc\n"},
		{"more than there are", "a\nb\n", 5, "a\nb\n"},
		{"no final newline", "a\nb\nc", 1, "c"},
		{"one", "a\n", 1, "a\n"},
		{"empty", "", 3, ""},
		{"across blocks", "first\n" + big + "\nlast\n", 2, big + "\nlast\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f.log")
			os.WriteFile(path, []byte(tc.text), 0o600)
			var b strings.Builder
			if err := printLogs(context.Background(), &b, path, tc.n, false); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Fatalf("got %q, want %q", clipText(b.String()), clipText(tc.want))
			}
		})
	}
}

func clipText(s string) string {
	if len(s) > 40 {
		return s[:20] + "…" + s[len(s)-20:]
	}
	return s
}

// TestLogsCommand: trellis logs prints the daemon's log, -n its last lines,
// and a home where no daemon ran gets an error that says so.
func TestLogsCommand(t *testing.T) {
	e := newEnv(t)
	if r := e.run("", "run", "hello"); r.code != 0 {
		t.Fatalf("trellis run: exit %d: %s", r.code, r.stderr)
	}
	r := e.run("", "logs")
	if r.code != 0 || !strings.Contains(r.stdout, `"msg":"trellisd started"`) {
		t.Fatalf("trellis logs: exit %d, stdout %.300s, stderr %s", r.code, r.stdout, r.stderr)
	}
	r = e.run("", "logs", "-n", "1")
	if n := strings.Count(r.stdout, "\n"); r.code != 0 || n != 1 || !strings.HasPrefix(r.stdout, "{") {
		t.Fatalf("trellis logs -n 1 printed %d lines: %q", n, r.stdout)
	}
	if r := e.run("", "logs", "-n", "-3"); r.code != exitUsage {
		t.Fatalf("trellis logs -n -3: exit %d, want %d", r.code, exitUsage)
	}

	other := newEnv(t)
	r = other.run("", "logs")
	if r.code != exitFailed || !strings.Contains(r.stderr, "no daemon has run with this home") {
		t.Fatalf("trellis logs without a log: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestLogsFollow: trellis logs -f prints appended lines, goes on in the new
// file after a rotation, and exits 0 on SIGINT.
func TestLogsFollow(t *testing.T) {
	e := newEnv(t)
	path := daemon.LogPath(e.home)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("{\"n\":0}\n{\"n\":1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := e.command(ctx, "logs", "-f", "-n", "1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case got := <-lines:
			if got != want {
				t.Fatalf("got line %q, want %q", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no line %q within 30 s", want)
		}
	}
	appendLine := func(p, line string) {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(f, line)
		f.Close()
	}
	expect(`{"n":1}`)
	appendLine(path, `{"n":2}`)
	expect(`{"n":2}`)
	// Rotate as lumberjack does: rename, then a new file.
	if err := os.Rename(path, filepath.Join(filepath.Dir(path), "trellisd-2026-01-01T00-00-00.000.log")); err != nil {
		t.Fatal(err)
	}
	appendLine(path, `{"n":3}`)
	expect(`{"n":3}`)
	appendLine(path, `{"n":4}`)
	expect(`{"n":4}`)

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("trellis logs -f after SIGINT: %v", err)
	}
}

// FuzzLastLines: printLogs -n N prints exactly the last N lines of any file.
func FuzzLastLines(f *testing.F) {
	f.Add([]byte("a\nb\nc\n"), uint8(2))
	f.Add([]byte("\n\n\n"), uint8(1))
	f.Add([]byte("no newline"), uint8(3))
	f.Add([]byte(""), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, n uint8) {
		if n == 0 {
			n = 1
		}
		path := filepath.Join(t.TempDir(), "f.log")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := printLogs(context.Background(), &b, path, int(n), false); err != nil {
			t.Fatal(err)
		}
		// The expected output, the slow way: split after each newline.
		var lines []string
		rest := string(data)
		for rest != "" {
			i := strings.IndexByte(rest, '\n')
			if i < 0 {
				lines = append(lines, rest)
				break
			}
			lines = append(lines, rest[:i+1])
			rest = rest[i+1:]
		}
		if len(lines) > int(n) {
			lines = lines[len(lines)-int(n):]
		}
		if want := strings.Join(lines, ""); b.String() != want {
			t.Fatalf("last %d lines of %q: got %q, want %q", n, data, b.String(), want)
		}
	})
}
