package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/trellis-run/trellis/runtime/auth"
)

// Info is the content of daemon.json (PROTOCOL.md §1).
type Info struct {
	Port            int    `json:"port"`
	GRPCPort        int    `json:"grpcPort"`
	PID             int    `json:"pid"`
	Token           string `json:"token"`
	StartedAt       string `json:"startedAt"`
	ProtocolVersion string `json:"protocolVersion"`
	Version         string `json:"version"`
	// Provider is the daemon's --provider ("" = the offline demo model),
	// and Store its --store with any password removed ("sqlite" or a
	// postgres:// DSN), so that a client can tell a daemon started with
	// other settings than it asks for. Store is "" in the daemon.json of a
	// daemon older than these fields.
	Provider string `json:"provider"`
	Store    string `json:"store"`
}

// RedactStore returns a --store value as daemon.json shows it: "sqlite" for
// the default, a DSN without its password.
func RedactStore(store string) string {
	if store == "" {
		return "sqlite"
	}
	u, err := url.Parse(store)
	if err != nil || u.User == nil {
		return store
	}
	if _, has := u.User.Password(); has {
		u.User = url.User(u.User.Username())
	}
	return u.String()
}

// InfoPath is where daemon.json lives in a home directory.
func InfoPath(home string) string { return filepath.Join(home, "daemon.json") }

// TokenPath is where the token lives in a home directory.
func TokenPath(home string) string { return filepath.Join(home, "token") }

// CommandsPath is the file recording the process groups of running
// commands, reaped at start-up after a crash.
func CommandsPath(home string) string { return filepath.Join(home, "commands.pgid") }

// LogPath is the daemon's log file in a home directory.
func LogPath(home string) string { return filepath.Join(home, "logs", "trellisd.log") }

func writeInfo(home string, info Info) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	return auth.WriteFileAtomic(InfoPath(home), append(b, '\n'))
}

// ReadInfo reads daemon.json; ErrNoDaemon when it is absent or names a
// process that no longer runs.
func ReadInfo(home string) (Info, error) {
	var info Info
	b, err := os.ReadFile(InfoPath(home))
	if errors.Is(err, fs.ErrNotExist) {
		return info, ErrNoDaemon
	}
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("%s is corrupt: %w", InfoPath(home), err)
	}
	if info.PID <= 0 || syscall.Kill(info.PID, 0) == syscall.ESRCH {
		return info, ErrNoDaemon
	}
	return info, nil
}

// ErrNoDaemon means no daemon runs for a home directory.
var ErrNoDaemon = errors.New("no daemon is running for this home directory")

func prepareHome(home string) error {
	for _, dir := range []string{home, filepath.Join(home, "logs")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create home directory: %w", err)
		}
	}
	return nil
}

func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }
