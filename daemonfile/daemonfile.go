// Package daemonfile is daemon.json (PROTOCOL.md §1): the file in a home
// directory through which a running daemon names its ports, pid and token.
// The daemon writes it; clients (package client, the CLI, tests) read it.
// It is a leaf (standard library only), so that a client finds the daemon
// without linking the daemon.
package daemonfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"syscall"

	"github.com/trellis-run/trellis/internal/atomicfile"
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
	// TLS says the ports serve TLS only (wss://, https://, gRPC over
	// TLS); TLSCert is the daemon's certificate file, which local clients
	// trust as it is.
	TLS     bool   `json:"tls,omitempty"`
	TLSCert string `json:"tlsCert,omitempty"`
}

// ErrNoDaemon means no daemon runs for a home directory.
var ErrNoDaemon = errors.New("no daemon is running for this home directory")

// Path is where daemon.json lives in a home directory.
func Path(home string) string { return filepath.Join(home, "daemon.json") }

// Write replaces daemon.json in home atomically (mode 0600: it holds the
// token).
func Write(home string, info Info) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(Path(home), append(b, '\n'))
}

// Read reads daemon.json; ErrNoDaemon when it is absent or names a process
// that no longer runs.
func Read(home string) (Info, error) {
	var info Info
	b, err := os.ReadFile(Path(home))
	if errors.Is(err, fs.ErrNotExist) {
		return info, ErrNoDaemon
	}
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("%s is corrupt: %w", Path(home), err)
	}
	if info.PID <= 0 || syscall.Kill(info.PID, 0) == syscall.ESRCH {
		return info, ErrNoDaemon
	}
	return info, nil
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
