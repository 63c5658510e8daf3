//go:build !trellis_lean

package sshbackend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/tool"
)

func (c Config) addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

// Dial connects and authenticates: the host key must be in known_hosts
// (an unknown or changed key is refused), auth is the key file or, without
// one, the ssh agent at $SSH_AUTH_SOCK.
func Dial(ctx context.Context, c Config) (*ssh.Client, error) {
	hostKeys, err := knownhosts.New(c.KnownHostsPath)
	if err != nil {
		return nil, fmt.Errorf("known_hosts %s: %w (add the host's key with ssh-keyscan)", c.KnownHostsPath, err)
	}
	var auth []ssh.AuthMethod
	if c.KeyPath != "" {
		pem, err := os.ReadFile(c.KeyPath)
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", c.KeyPath, err)
		}
		signer, err := ssh.ParsePrivateKey(pem)
		if err != nil {
			return nil, fmt.Errorf("key %s: %v (passphrase-protected keys need the ssh agent)", c.KeyPath, err)
		}
		auth = append(auth, ssh.PublicKeys(signer))
	} else if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			return nil, fmt.Errorf("ssh agent %s: %w", sock, err)
		}
		auth = append(auth, ssh.PublicKeysCallback(agent.NewClient(conn).Signers))
	} else {
		return nil, errors.New("no keyPath given and no ssh agent (SSH_AUTH_SOCK) to authenticate with")
	}
	cfg := &ssh.ClientConfig{User: c.User, Auth: auth, HostKeyCallback: hostKeys, Timeout: 15 * time.Second}
	d := net.Dialer{Timeout: 15 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", c.addr())
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.addr(), err)
	}
	sc, chans, reqs, err := ssh.NewClientConn(conn, c.addr(), cfg)
	if err != nil {
		conn.Close()
		var ke *knownhosts.KeyError
		if errors.As(err, &ke) {
			if len(ke.Want) > 0 {
				return nil, fmt.Errorf("the host key of %s does not match %s: refused (possible man-in-the-middle; update known_hosts only if the key changed on purpose)", c.addr(), c.KnownHostsPath)
			}
			return nil, fmt.Errorf("%s is not in %s: refused (add its key with ssh-keyscan after checking it)", c.addr(), c.KnownHostsPath)
		}
		return nil, fmt.Errorf("ssh handshake with %s: %w", c.addr(), err)
	}
	return ssh.NewClient(sc, chans, reqs), nil
}

// Pool keeps one connection per backend config.
type Pool struct {
	mu      sync.Mutex
	clients map[Config]*ssh.Client
}

// NewPool returns an empty pool.
func NewPool() *Pool { return &Pool{clients: map[Config]*ssh.Client{}} }

// Check connects with c (reusing a live connection) and verifies the
// remote workdir is a directory.
func (p *Pool) Check(ctx context.Context, c Config) error {
	cl, err := p.client(ctx, c)
	if err != nil {
		return err
	}
	out, code, err := run(ctx, cl, "cd -- "+quote(c.Workdir)+" && pwd", nil, nil)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("remote workdir %s: %s", c.Workdir, strings.TrimSpace(out))
	}
	return nil
}

func (p *Pool) client(ctx context.Context, c Config) (*ssh.Client, error) {
	p.mu.Lock()
	cl := p.clients[c]
	p.mu.Unlock()
	if cl != nil {
		// A keepalive request tells whether the connection still works.
		if _, _, err := cl.SendRequest("keepalive@openssh.com", true, nil); err == nil {
			return cl, nil
		}
		cl.Close()
	}
	cl, err := Dial(ctx, c)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.clients[c] = cl
	p.mu.Unlock()
	return cl, nil
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, cl := range p.clients {
		cl.Close()
		delete(p.clients, k)
	}
}

// Registry returns the tools of a session on backend c: shell, read_file,
// write_file and list_dir act on the remote host; the other workdir tools
// are listed inactive (they would act on the local machine).
func (p *Pool) Registry(c Config) (*tool.Registry, error) {
	tools := []tool.Tool{
		&remoteShell{p: p, c: c},
		&remoteFile{p: p, c: c, name: "read_file"},
		&remoteFile{p: p, c: c, name: "write_file"},
		&remoteFile{p: p, c: c, name: "list_dir"},
	}
	for _, n := range []string{"glob", "grep", "edit_file"} {
		tools = append(tools, unavailable{name: n, c: c})
	}
	return tool.NewRegistry(tools...)
}

// run runs a command on a new session; output is stdout and stderr
// together (streamed to progress when set).
func run(ctx context.Context, cl *ssh.Client, cmd string, stdin []byte, progress tool.ProgressFunc) (string, int, error) {
	s, err := cl.NewSession()
	if err != nil {
		return "", 0, fmt.Errorf("open an ssh session: %w", err)
	}
	defer s.Close()
	out := tool.NewStreamedOutput(progress)
	s.Stdout, s.Stderr = out.Stdout(), out.Stderr()
	if stdin != nil {
		s.Stdin = bytes.NewReader(stdin)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(cmd) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// The remote command dies with its session.
		_ = s.Signal(ssh.SIGKILL)
		s.Close()
		return out.String(), -1, ctx.Err()
	}
	var exit *ssh.ExitError
	if errors.As(err, &exit) {
		return out.String(), exit.ExitStatus(), nil
	}
	if err != nil {
		return out.String(), -1, err
	}
	return out.String(), 0, nil
}

// quote single-quotes s for a POSIX shell.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// confined is a shell prefix that resolves path p inside workdir on the
// remote host (symlinks included) into $p, or fails with exit 3.
func confined(workdir, p string) string {
	if !path.IsAbs(p) {
		p = path.Join(workdir, p)
	}
	return "wd=$(realpath -- " + quote(workdir) + ") && p=$(realpath -m -- " + quote(p) + ") && " +
		`case "$p/" in "$wd"/*) ;; *) echo "path $p is outside the remote workdir $wd" >&2; exit 3;; esac && `
}

// remoteShellArgs are the arguments of the remote shell.
type remoteShellArgs struct {
	Command    string  `json:"command" jsonschema:"minLength=1" jsonschema_description:"The command line."`
	TimeoutSec float64 `json:"timeoutSec,omitempty" jsonschema:"minimum=1,maximum=3600"`
}

type remoteShell struct {
	tool.Args[remoteShellArgs]
	p *Pool
	c Config
}

func (*remoteShell) Name() string      { return "shell" }
func (*remoteShell) Tag() approval.Tag { return approval.TagExec }
func (r *remoteShell) Description() string {
	return "Run a command with sh -c on the remote host " + r.c.Host + " (ssh backend) in the remote workdir " + r.c.Workdir +
		"; returns its output and exit code. On timeout or interrupt its whole remote process group is killed."
}

func (r *remoteShell) Run(ctx context.Context, call tool.Call) (tool.Result, error) {
	var args remoteShellArgs
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return tool.Failed("bad arguments: %v", err), nil
	}
	timeout := 120 * time.Second
	if args.TimeoutSec > 0 {
		timeout = time.Duration(args.TimeoutSec * float64(time.Second))
	}
	cl, err := r.p.client(ctx, r.c)
	if err != nil {
		return tool.Failed("ssh backend %s: %v", r.c.addr(), err), nil
	}
	// The timeout is the command's: it starts once the host is reached, so
	// a slow connection does not eat it.
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, code, stopped, err := runShell(cctx, cl, r.c.Workdir, args.Command, call.Progress)
	text, full := tool.CapOutput(out, "shell", call.ID, call.OutputDir)
	switch {
	case ctx.Err() != nil:
		return tool.Result{OK: false, Output: text + "\n[interrupted]", Error: "the command was interrupted; " + stopped, FullOutput: full}, nil
	case cctx.Err() != nil:
		return tool.Result{OK: false, Output: text + fmt.Sprintf("\n[timed out after %v]", timeout),
			Error: fmt.Sprintf("the command timed out after %v; %s", timeout, stopped), FullOutput: full}, nil
	case err != nil:
		return tool.Failed("ssh backend %s: %v", r.c.addr(), err), nil
	}
	res := tool.Result{OK: code == 0, Output: text + fmt.Sprintf("\n[exit code %d]", code), FullOutput: full}
	if code != 0 {
		res.Error = fmt.Sprintf("exit code %d", code)
	}
	return res, nil
}

type remoteFile struct {
	p    *Pool
	c    Config
	name string
}

func (f *remoteFile) Name() string { return f.name }
func (f *remoteFile) Tag() approval.Tag {
	if f.name == "write_file" {
		return approval.TagWrite
	}
	return approval.TagRead
}
func (f *remoteFile) Description() string {
	switch f.name {
	case "write_file":
		return "Write a file (creating directories) in the remote workdir " + f.c.Workdir + " on " + f.c.Host + " (ssh backend)."
	case "read_file":
		return "Read a text file in the remote workdir " + f.c.Workdir + " on " + f.c.Host + " (ssh backend)."
	}
	return "List a directory in the remote workdir " + f.c.Workdir + " on " + f.c.Host + " (ssh backend)."
}
func (f *remoteFile) InputSchema() json.RawMessage {
	switch f.name {
	case "write_file":
		return tool.SchemaOf[remoteWriteArgs]()
	case "list_dir":
		return tool.SchemaOf[remoteListArgs]()
	}
	return tool.SchemaOf[remoteReadArgs]()
}

// The arguments of the remote file tools.
type (
	remoteWriteArgs struct {
		Path    string `json:"path" jsonschema:"minLength=1"`
		Content string `json:"content"`
	}
	remoteReadArgs struct {
		Path string `json:"path" jsonschema:"minLength=1"`
	}
	remoteListArgs struct {
		Path string `json:"path,omitempty"`
	}
)

// maxRead bounds what read_file returns of a remote file.
const maxRead = 256 << 10

func (f *remoteFile) Run(ctx context.Context, call tool.Call) (tool.Result, error) {
	var args remoteWriteArgs // the others' fields are among its own
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return tool.Failed("bad arguments: %v", err), nil
	}
	if args.Path == "" {
		args.Path = "."
	}
	cl, err := f.p.client(ctx, f.c)
	if err != nil {
		return tool.Failed("ssh backend %s: %v", f.c.addr(), err), nil
	}
	prefix := confined(f.c.Workdir, args.Path)
	var cmd string
	var stdin []byte
	switch f.name {
	case "write_file":
		cmd = prefix + `mkdir -p -- "$(dirname -- "$p")" && cat > "$p" && echo "wrote $(wc -c < "$p") bytes to $p"`
		stdin = []byte(args.Content)
	case "read_file":
		cmd = prefix + `head -c ` + strconv.Itoa(maxRead+1) + ` -- "$p"`
	default:
		cmd = prefix + `ls -la -- "$p"`
	}
	out, code, err := run(ctx, cl, cmd, stdin, nil)
	if err != nil {
		return tool.Failed("ssh backend %s: %v", f.c.addr(), err), nil
	}
	if code != 0 {
		return tool.Failed("%s %s on %s failed: %s", f.name, args.Path, f.c.Host, strings.TrimSpace(out)), nil
	}
	if f.name == "read_file" && len(out) > maxRead {
		out = out[:maxRead] + fmt.Sprintf("\n[cut at %d bytes]", maxRead)
	}
	return tool.Result{OK: true, Output: out}, nil
}

// unavailable is a workdir tool the ssh backend does not provide: listed
// inactive with the reason, so it never acts on the local machine instead.
type unavailable struct {
	name string
	c    Config
}

func (u unavailable) Name() string                 { return u.name }
func (u unavailable) Tag() approval.Tag            { return approval.TagRead }
func (u unavailable) Description() string          { return u.name + " (not available on the ssh backend)" }
func (u unavailable) InputSchema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (u unavailable) State() tool.State {
	return tool.State{Active: false, Reason: u.name + " does not run on the ssh backend (" + u.c.Host + "); use shell there instead"}
}
func (u unavailable) Run(context.Context, tool.Call) (tool.Result, error) {
	return tool.Failed("%s does not run on the ssh backend; use shell", u.name), nil
}

// ErrLeftOut tells whether err says the ssh client is not in this build
// (never, in this one).
func ErrLeftOut(error) bool { return false }
