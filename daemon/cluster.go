package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/trellis-run/trellis/internal/atomicfile"
	"github.com/trellis-run/trellis/runtime/agents"
	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/version"
)

// clusterStore is a store several daemons share (the PostgreSQL store):
// beyond store.Store, it queues approvals for the whole cluster, keeps the
// shared agent definitions, and sets a setting only if it is unset.
type clusterStore interface {
	store.Store
	store.ApprovalQueue
	agents.SharedStore
	// InitSetting stores value unless the key has one, and returns the
	// value the key then has.
	InitSetting(ctx context.Context, namespace, key string, value json.RawMessage) (json.RawMessage, error)
}

// DaemonIDPath is where a home directory keeps its daemon's cluster id: a
// restarted daemon keeps its id, so it takes its own sessions back at once.
func DaemonIDPath(home string) string { return filepath.Join(home, "daemon-id") }

func loadDaemonID(home string) (string, error) {
	b, err := os.ReadFile(DaemonIDPath(home))
	if err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read the daemon id: %w", err)
	}
	id := ids.New("d")
	if err := atomicfile.Write(DaemonIDPath(home), []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("save the daemon id: %w", err)
	}
	return id, nil
}

// newNode makes this daemon a member of the cluster on the PostgreSQL store:
// its event log is fenced by the node's leases, a session it takes over is
// reloaded and its open turns closed, one it loses is dropped. Its lease
// callbacks are a real construction cycle (the event log and the sessions
// are built on the node, and the node calls them back): they read the
// services built after it, and run only once startNode started it, after
// they are.
func (r *runtimeServices) newNode(cfg Config) (*cluster.Node, error) {
	id, err := loadDaemonID(cfg.Home)
	if err != nil {
		return nil, err
	}
	return cluster.New(cluster.Options{
		Store: r.store, DaemonID: id, GRPCAddr: cfg.Advertise, Version: version.Server, Lease: cfg.Lease, Log: r.log,
		OnAcquire: func(ctx context.Context, sessionID string) error {
			r.events.Reload(sessionID)
			if r.broker != nil {
				// The previous owner's turn no longer waits for them.
				r.broker.AbandonSession(ctx, sessionID)
			}
			return r.sessions.Recover(ctx, sessionID)
		},
		OnLost: func(sessionID string) {
			r.sessions.Lost(sessionID)
			r.events.Reload(sessionID)
		},
	}), nil
}

// startNode registers the daemon, closes the open turns of sessions whose
// owner is gone and starts waking local event tails on other daemons'
// commits.
func (r *runtimeServices) startNode(ctx context.Context) error {
	if err := r.node.Start(ctx); err != nil {
		return err
	}
	if err := r.sessions.RecoverOpenTurns(ctx); err != nil {
		return fmt.Errorf("restore sessions: %w", err)
	}
	tailCtx, cancel := context.WithCancel(context.Background())
	r.stopTail = cancel
	go r.node.Tail(tailCtx, r.events, cluster.DefaultPoll)
	// Every third of a lease: close the open turns of sessions whose owner
	// died (their lease expired), and read the provider configuration and
	// keys again, so that a change made through another daemon applies here.
	go r.every(tailCtx, "close the turns of a crashed daemon's sessions", r.sessions.RecoverOpenTurns)
	go r.every(tailCtx, "reload the provider configuration", r.providers.Reload)
	// A slot another daemon releases wakes this daemon's calls waiting for it.
	go r.providers.WakeLimits(tailCtx)
	go r.broker.Run(tailCtx)
	return nil
}

// every runs fn every third of a lease until ctx ends, logging its
// failures as what failed.
func (r *runtimeServices) every(ctx context.Context, what string, fn func(context.Context) error) {
	t := time.NewTicker(r.node.Lease() / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn(what, "err", err)
		}
	}
}

// stopNode stops the wake-ups, gives every lease back (another daemon takes
// the sessions at once) and leaves the registry; after the sessions stopped.
func (r *runtimeServices) stopNode(ctx context.Context) {
	if r.stopTail != nil {
		r.stopTail()
	}
	if r.node != nil {
		r.node.Close(ctx)
	}
}

// clusterToken returns the token every daemon on the PostgreSQL store
// shares: the first daemon's token, kept in the database, unless the
// operator gave a token file. It rewrites <home>/token to match, so that
// the CLI on this machine finds it.
func clusterToken(ctx context.Context, pg clusterStore, home, local string) (string, error) {
	b, _ := json.Marshal(local)
	got, err := pg.InitSetting(ctx, "cluster", "token", b)
	if err != nil {
		return "", fmt.Errorf("read the cluster's token: %w", err)
	}
	var tok string
	if err := json.Unmarshal(got, &tok); err != nil || len(tok) < 32 {
		return "", errors.New("the cluster's token in the database is unusable: delete the settings row cluster/token to have a new one made")
	}
	if tok != local {
		if err := atomicfile.Write(TokenPath(home), []byte(tok+"\n")); err != nil {
			return "", err
		}
	}
	return tok, nil
}

// clusterMutualTLS keeps the daemons of a PostgreSQL store together on
// mutual TLS: a daemon with cluster certificates (mutual) records in the
// database that the cluster uses them, and a daemon without them then
// refuses to start (it could neither forward its calls nor serve the
// others'), saying which flags it needs.
func clusterMutualTLS(ctx context.Context, pg clusterStore, mutual bool) error {
	if mutual {
		if err := pg.PutSetting(ctx, store.Unfenced(), "cluster", "mutualTLS", json.RawMessage("true")); err != nil {
			return fmt.Errorf("record that the cluster uses mutual TLS: %w", err)
		}
		return nil
	}
	got, err := pg.GetSetting(ctx, "cluster", "mutualTLS")
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read whether the cluster uses mutual TLS: %w", err)
	}
	var on bool
	if json.Unmarshal(got, &on) == nil && on {
		return errors.New("the daemons of this PostgreSQL store authenticate each other with mutual TLS (a daemon with cluster certificates recorded it): " +
			"start this daemon with --cluster-ca, --cluster-cert and --cluster-key (a certificate signed by the cluster's CA) and --tls-cert/--tls-key; " +
			"to stop using mutual TLS, stop every daemon and delete the settings row cluster/mutualTLS")
	}
	return nil
}
