package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/trellis-run/trellis/daemonfile"
)

// ErrNotAnswering means daemon.json names a running process whose /health
// does not answer: a daemon that hangs, or a stale file whose pid was
// reused by another process.
var ErrNotAnswering = errors.New("the daemon named in daemon.json does not answer")

// Probe returns the daemon.json of home when its daemon answers /health. It
// fails with daemonfile.ErrNoDaemon when none runs, and with ErrNotAnswering
// when daemon.json names a live process that does not answer within wait.
func Probe(ctx context.Context, home string, wait time.Duration) (daemonfile.Info, error) {
	info, err := daemonfile.Read(home)
	if err != nil {
		return info, err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := Health(ctx, info)
		if err == nil {
			return info, nil
		}
		select {
		case <-ctx.Done():
			return info, fmt.Errorf("%w (pid %d, port %d: %v); if it is stuck, kill it or remove %s",
				ErrNotAnswering, info.PID, info.Port, err, daemonfile.Path(home))
		case <-tick.C:
		}
	}
}

// Health asks the daemon's /health once.
func Health(ctx context.Context, info daemonfile.Info) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	base, _, hc, err := BaseURLs(info)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK || body.Status != "ok" {
		return fmt.Errorf("/health answered %s", resp.Status)
	}
	return nil
}
