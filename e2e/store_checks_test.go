package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// TestCorruptStoreIsRefusedAtStart: trellisd will not serve a database
// that fails quick_check; it exits 1 naming the file and the recovery.
func TestCorruptStoreIsRefusedAtStart(t *testing.T) {
	// A sound store to damage: a daemon that ran and stopped.
	good := t.TempDir()
	p := startProc(t, good)
	c := dialInfo(t, p.info)
	for range 5 {
		id := createSession(t, c, nil)
		for range 4 {
			turn(t, c, id, "hello "+strings.Repeat("padding ", 300))
		}
	}
	c.Close()
	p.cmd.Process.Signal(os.Interrupt)
	p.cmd.Wait()
	sound, err := os.ReadFile(filepath.Join(good, "trellis.db"))
	if err != nil || len(sound) < 8192 {
		t.Fatalf("store of %d bytes: %v", len(sound), err)
	}
	garbled := append([]byte(nil), sound...)
	for i := len(garbled) / 2; i < len(garbled)/2+4096 && i < len(garbled); i++ {
		garbled[i] ^= 0x5a // a page in the middle
	}
	for name, content := range map[string][]byte{
		"not a database": bytes.Repeat([]byte("garbage!"), 1024),
		"truncated":      sound[:len(sound)/3],
		"garbled page":   garbled,
	} {
		t.Run(name, func(t *testing.T) {
			home := t.TempDir()
			db := filepath.Join(home, "trellis.db")
			os.WriteFile(db, content, 0o600)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, trellisdBin, "--home", home, "--provider", "fake").CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Fatalf("trellisd: %v\n%s", err, out)
			}
			for _, want := range []string{db, "quick_check", ".recover", "will not serve"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("output does not name %q:\n%s", want, out)
				}
			}
			if _, err := os.Stat(filepath.Join(home, "daemon.json")); err == nil {
				t.Error("daemon.json written: the daemon served")
			}
		})
	}
}

// TestEmptyStoreIsRefusedAtStart: a 0-byte trellis.db (a truncated store)
// is not served as an empty one: trellisd exits 1 naming the file and what
// to do, and the file is left as it was.
func TestEmptyStoreIsRefusedAtStart(t *testing.T) {
	home := t.TempDir()
	db := filepath.Join(home, "trellis.db")
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, trellisdBin, "--home", home, "--provider", "fake").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("trellisd on an empty trellis.db: %v\n%s", err, out)
	}
	for _, want := range []string{db, "empty (0 bytes)", "rm " + db} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output does not say %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "daemon.json")); err == nil {
		t.Error("daemon.json written: the daemon served")
	}
	if fi, err := os.Stat(db); err != nil || fi.Size() != 0 {
		t.Errorf("trellis.db after the refusal: %v, %v", fi, err)
	}
}

// TestStoreBusyIsReported: while another process holds the database's
// write lock past the busy timeout, a write answers store_busy with retry
// advice (not internal), and works once the lock is gone.
func TestStoreBusyIsReported(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	db, err := sql.Open("sqlite", filepath.Join(d.Home(), "trellis.db")+"?_busy_timeout=1000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	rerr := c.Call(context.Background(), "session.create", map[string]any{"workdir": t.TempDir()}, nil)
	if rerr == nil || !rerr.HasCode("store_busy") || fmt.Sprint(rerr.Data["retryAfterMs"]) != "1000" || rerr.Data["errorId"] == nil {
		t.Fatalf("session.create under a held lock: %v (data %v)", rerr, rerr)
	}
	conn.ExecContext(context.Background(), "ROLLBACK")
	conn.Close()
	createSession(t, c, nil)
	// The cause is in the daemon's log under the errorId the client got.
	logged, err := os.ReadFile(filepath.Join(d.Home(), "logs", "trellisd.log"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(string(logged), "\n") {
		if strings.Contains(line, fmt.Sprint(rerr.Data["errorId"])) && strings.Contains(line, "locked") {
			found = true
		}
	}
	if !found {
		t.Errorf("no log line names errorId %v and the lock:\n%s", rerr.Data["errorId"], logged)
	}
}
