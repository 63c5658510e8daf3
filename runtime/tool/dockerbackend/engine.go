//go:build !trellis_lean

package dockerbackend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/trellis-run/trellis/runtime/tool"
)

// The labels every container made here carries.
const (
	// LabelOwner names the daemon that made the container (host and home):
	// Reap removes the ones a killed daemon of that name left.
	LabelOwner = "run.trellis.owner"
	// LabelSession names the session the container belongs to.
	LabelSession = "run.trellis.session"
)

// keeper is the container's main process: it waits, doing nothing, until
// the container is removed. Commands run beside it with exec.
var keeper = []string{"/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"}

// Engine makes and removes the sessions' containers. It is safe for
// concurrent use; the engine client is made on first use, so a daemon
// whose sessions never choose docker never talks to an engine.
type Engine struct {
	owner   string
	protect []string

	mu     sync.Mutex
	cli    *client.Client
	boxes  map[string]*box // session id → its container
	closed bool
}

// box is one session's container; mu serialises making it.
type box struct {
	mu      sync.Mutex
	c       Config
	workdir string
	id      string // "" until made
}

// New returns an engine for a daemon named owner (stable across its
// restarts: its host and home). protect lists directories no container may
// see (the daemon's home): a session whose workdir holds one of them gets no
// container.
func New(owner string, protect ...string) *Engine {
	return &Engine{owner: owner, protect: protect, boxes: map[string]*box{}}
}

// client returns the engine client, connecting on first use (DOCKER_HOST,
// else the default socket) and agreeing on the API version.
func (e *Engine) client(ctx context.Context) (*client.Client, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errors.New("the daemon is stopping")
	}
	if e.cli != nil {
		return e.cli, nil
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker engine client: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("no Docker Engine answers at %s: %v (start dockerd, or set DOCKER_HOST)", cli.DaemonHost(), err)
	}
	e.cli = cli
	return cli, nil
}

// Check tells whether a session can run on c: the engine answers and has
// the image.
func (e *Engine) Check(ctx context.Context, c Config) error {
	cli, err := e.client(ctx)
	if err != nil {
		return err
	}
	if _, err := cli.ImageInspect(ctx, c.Image); err != nil {
		return fmt.Errorf("image %q is not on the engine at %s: %v (nothing is pulled: load, import or build it there first)", c.Image, cli.DaemonHost(), err)
	}
	return nil
}

// Registry returns the tools of a session on c whose workdir is workdir:
// shell runs in the session's container; the file tools are the local ones
// (the container sees the same directory at the same path).
func (e *Engine) Registry(sessionID, workdir string, c Config) (*tool.Registry, error) {
	e.mu.Lock()
	b := e.boxes[sessionID]
	if b == nil || b.c != c || b.workdir != workdir {
		if b != nil {
			go e.remove(context.Background(), b)
		}
		b = &box{c: c, workdir: workdir}
		e.boxes[sessionID] = b
	}
	e.mu.Unlock()
	return tool.NewRegistry(&shell{e: e, b: b, session: sessionID})
}

// container returns the id of b's running container, making and starting it
// on first use.
func (e *Engine) container(ctx context.Context, b *box, session string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.id != "" {
		return b.id, nil
	}
	cli, err := e.client(ctx)
	if err != nil {
		return "", err
	}
	dir, err := filepath.EvalSymlinks(b.workdir)
	if err != nil {
		return "", fmt.Errorf("workdir %s: %w", b.workdir, err)
	}
	for _, p := range e.protect {
		if within(p, dir) {
			return "", fmt.Errorf("the workdir %s holds the daemon's home %s, which no container may see: give the session a workdir beside it", dir, p)
		}
	}
	pids := b.c.Pids
	made, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image:      b.c.Image,
			Cmd:        keeper,
			User:       b.c.User,
			WorkingDir: b.workdir,
			Labels:     map[string]string{LabelOwner: e.owner, LabelSession: session},
		},
		HostConfig: &container.HostConfig{
			Mounts:      []mount.Mount{{Type: mount.TypeBind, Source: dir, Target: b.workdir}},
			NetworkMode: container.NetworkMode(b.c.Network),
			Resources: container.Resources{
				NanoCPUs:  int64(b.c.CPUs * 1e9),
				Memory:    b.c.MemoryMB << 20,
				PidsLimit: &pids,
			},
			CapDrop:     []string{"ALL"},
			SecurityOpt: []string{"no-new-privileges"},
		},
	})
	if err != nil {
		return "", fmt.Errorf("make the session's container from %s: %w", b.c.Image, err)
	}
	if _, err := cli.ContainerStart(ctx, made.ID, client.ContainerStartOptions{}); err != nil {
		_, _ = cli.ContainerRemove(context.WithoutCancel(ctx), made.ID, client.ContainerRemoveOptions{Force: true})
		return "", fmt.Errorf("start the session's container from %s: %w", b.c.Image, err)
	}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		_, _ = cli.ContainerRemove(context.WithoutCancel(ctx), made.ID, client.ContainerRemoveOptions{Force: true})
		return "", errors.New("the daemon is stopping")
	}
	b.id = made.ID
	return b.id, nil
}

// within reports whether path p is dir or lies under it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// remove removes b's container, if it has one.
func (e *Engine) remove(ctx context.Context, b *box) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.id == "" {
		return nil
	}
	e.mu.Lock()
	cli := e.cli
	e.mu.Unlock()
	if cli == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := cli.ContainerRemove(ctx, b.id, client.ContainerRemoveOptions{Force: true}); err != nil {
		return fmt.Errorf("remove container %s: %w", b.id, err)
	}
	b.id = ""
	return nil
}

// CloseSession removes the session's container: the session closed or
// left the docker backend.
func (e *Engine) CloseSession(ctx context.Context, sessionID string) error {
	e.mu.Lock()
	b := e.boxes[sessionID]
	delete(e.boxes, sessionID)
	e.mu.Unlock()
	if b == nil {
		return nil
	}
	return e.remove(ctx, b)
}

// Reap removes the containers a daemon of this owner left behind when it
// was killed. The daemon calls it at start, before any session runs; with
// no engine to reach it does nothing.
func (e *Engine) Reap(ctx context.Context) (int, error) {
	if _, err := os.Stat(socketPath()); err != nil && os.Getenv("DOCKER_HOST") == "" {
		return 0, nil // no engine on this machine
	}
	cli, err := e.client(ctx)
	if err != nil {
		return 0, nil
	}
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: client.Filters{}.Add("label", LabelOwner+"="+e.owner)})
	if err != nil {
		return 0, fmt.Errorf("list this daemon's containers: %w", err)
	}
	var errs []error
	n := 0
	for _, c := range list.Items {
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// socketPath is the engine's default unix socket.
func socketPath() string { return strings.TrimPrefix(client.DefaultDockerHost, "unix://") }

// Close removes every container made here and closes the client; later
// calls fail.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	boxes := e.boxes
	e.boxes = map[string]*box{}
	e.mu.Unlock()
	var errs []error
	for _, b := range boxes {
		errs = append(errs, e.remove(context.Background(), b))
	}
	e.mu.Lock()
	if e.cli != nil {
		e.cli.Close()
		e.cli = nil
	}
	e.mu.Unlock()
	return errors.Join(errs...)
}

// ErrLeftOut tells whether err says the engine client is not in this build
// (never, in this one).
func ErrLeftOut(error) bool { return false }
