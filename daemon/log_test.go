package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/telemetry"
)

// TestLogRotation: the log file is rotated at LogMaxSizeMB, LogMaxFiles old
// files are kept, every file is 0600 and holds whole JSON lines, and a line
// logged with a request context carries its ids.
func TestLogRotation(t *testing.T) {
	home := t.TempDir()
	if err := prepareHome(home); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Home: home, LogMaxSizeMB: 1, LogMaxFiles: 2, LogLevel: "info"}
	log, closer, err := newLogger(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := telemetry.WithTurnID(telemetry.WithRequestID(context.Background(), "rq-test"), "t-test")
	pad := strings.Repeat("x", 1000)
	const lines = 5000 // ≈ 5 MB: four rotations at 1 MB
	for i := range lines {
		log.InfoContext(ctx, "filler", "i", i, "pad", pad)
	}
	closer.Close()

	dir := filepath.Join(home, "logs")
	var files []string
	// lumberjack deletes the files beyond MaxBackups in the background.
	deadline := time.Now().Add(30 * time.Second)
	for {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		files = files[:0]
		for _, e := range entries {
			files = append(files, e.Name())
		}
		if len(files) == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(files) != 3 {
		t.Fatalf("log files %v: want the current one and 2 rotated ones", files)
	}
	last := -1
	for _, name := range files {
		path := filepath.Join(dir, name)
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", name, st.Mode().Perm())
		}
		if st.Size() > 1<<20 {
			t.Errorf("%s is %d bytes, over the 1 MB limit", name, st.Size())
		}
		f, _ := os.Open(path)
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("%s: a line is not JSON (%v): %.80s", name, err, sc.Text())
			}
			if m["requestId"] != "rq-test" || m["turnId"] != "t-test" {
				t.Fatalf("%s: a line lacks the ids: %.200s", name, sc.Text())
			}
			if name == "trellisd.log" {
				last = int(m["i"].(float64))
			}
		}
		f.Close()
	}
	if last != lines-1 {
		t.Errorf("the current file ends with line %d, want %d", last, lines-1)
	}
}

func TestLogConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{LogMaxSizeMB: -1}, "log-max-size -1"},
		{Config{LogMaxFiles: -2}, "log-max-files -2"},
	} {
		err := tc.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if c := (Config{}).WithDefaults(); c.LogMaxSizeMB != 100 || c.LogMaxFiles != 5 {
		t.Errorf("defaults: %d MB, %d files", c.LogMaxSizeMB, c.LogMaxFiles)
	}
}
