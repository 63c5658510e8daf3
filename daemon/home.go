package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/trellis-run/trellis/protocol/events"
)

// TokenPath is where the token lives in a home directory.
func TokenPath(home string) string { return filepath.Join(home, "token") }

// CommandsPath is the file recording the process groups of running
// commands, reaped at start-up after a crash.
func CommandsPath(home string) string { return filepath.Join(home, "commands.pgid") }

// LogPath is the daemon's log file in a home directory.
func LogPath(home string) string { return filepath.Join(home, "logs", "trellisd.log") }

// OutputsDir is where the full outputs cut for the model are kept, one
// directory per session.
func OutputsDir(home string) string { return filepath.Join(home, "outputs") }

func prepareHome(home string) error {
	for _, dir := range []string{home, filepath.Join(home, "logs")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create home directory: %w", err)
		}
	}
	return nil
}

func formatTime(t time.Time) string { return t.UTC().Format(events.TimeFormat) }
