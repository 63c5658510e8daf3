//go:build !trellis_lean

package dockerbackend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/tool"
)

// shellArgs are the docker shell's arguments (the local shell's).
type shellArgs struct {
	Command    string  `json:"command" jsonschema:"minLength=1" jsonschema_description:"The command line, run with sh -c."`
	TimeoutSec float64 `json:"timeoutSec,omitempty" jsonschema:"type=integer,minimum=1,maximum=600" jsonschema_description:"Seconds before the command is killed (default 120)."`
}

// markerVar names the variable each call's processes inherit: a stop kills
// every process whose environment holds the call's value, so a process that
// left the command's process group is found too.
const markerVar = "TRELLIS_CALL"

// killScript kills every process of the container whose environment holds
// $1 (it runs in an exec of its own; its own environment lacks it).
const killScript = `for p in /proc/[0-9]*; do grep -qs "$1" "$p/environ" && kill -9 "${p#/proc/}" 2>/dev/null; done; true`

type shell struct {
	tool.Args[shellArgs]
	e       *Engine
	b       *box
	session string
}

func (*shell) Name() string      { return "shell" }
func (*shell) Tag() approval.Tag { return approval.TagExec }
func (s *shell) Description() string {
	return "Run a command with sh -c in this session's container (docker backend, image " + s.b.c.Image +
		", network " + s.b.c.Network + ") in the workdir " + s.b.workdir +
		", which is the same directory the file tools see; returns its output and exit code. " +
		"On timeout or interrupt every process it started is killed, and none outlives it."
}

func (s *shell) Run(ctx context.Context, call tool.Call) (tool.Result, error) {
	var args shellArgs
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return tool.Failed("bad arguments: %v", err), nil
	}
	if call.Mode == "plan" && s.b.c.Network != "none" {
		// Plan mode keeps commands off the network, as on the local
		// backend; a container's network is fixed when it is made.
		return tool.Failed("plan mode runs commands without network, and this session's container has network %s: "+
			"switch the session to accept or auto mode, or set the docker backend's network to none", s.b.c.Network), nil
	}
	timeout := 120 * time.Second
	if args.TimeoutSec > 0 {
		timeout = time.Duration(args.TimeoutSec * float64(time.Second))
	}
	id, err := s.e.container(ctx, s.b, s.session)
	if err != nil {
		return tool.Failed("docker backend: %v", err), nil
	}
	cli, err := s.e.client(ctx)
	if err != nil {
		return tool.Failed("docker backend: %v", err), nil
	}
	// The timeout is the command's: it starts once the container runs, so
	// making it does not eat into it.
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, code, err := s.exec(cctx, cli, id, args.Command, call.Progress)
	text, full := tool.CapOutput(out, "shell", call.ID, call.OutputDir)
	switch {
	case ctx.Err() != nil:
		return tool.Result{OK: false, Output: text + "\n[interrupted]", Error: "the command was interrupted; its processes were killed", FullOutput: full}, nil
	case cctx.Err() != nil:
		return tool.Result{OK: false, Output: text + fmt.Sprintf("\n[timed out after %v]", timeout),
			Error: fmt.Sprintf("the command timed out after %v; its processes were killed", timeout), FullOutput: full}, nil
	case err != nil:
		return tool.Failed("docker backend: %v", err), nil
	}
	res := tool.Result{OK: code == 0, Output: text + fmt.Sprintf("\n[exit code %d]", code), FullOutput: full}
	if code != 0 {
		res.Error = fmt.Sprintf("exit code %d", code)
	}
	return res, nil
}

// exec runs command in container id, streaming its output to progress, and
// returns its output and exit code. When ctx ends first, or once the command
// exits, every process it started is killed.
func (s *shell) exec(ctx context.Context, cli *client.Client, id, command string, progress tool.ProgressFunc) (string, int, error) {
	marker := newMarker()
	made, err := cli.ExecCreate(ctx, id, client.ExecCreateOptions{
		User: s.b.c.User, WorkingDir: s.b.workdir, Cmd: []string{"/bin/sh", "-c", command},
		Env: []string{markerVar + "=" + marker}, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return "", -1, fmt.Errorf("exec in the session's container: %w", err)
	}
	att, err := cli.ExecAttach(ctx, made.ID, client.ExecAttachOptions{})
	if err != nil {
		return "", -1, fmt.Errorf("start the command in the session's container: %w", err)
	}
	defer att.Close()
	out := tool.NewStreamedOutput(progress)
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out.Stdout(), out.Stderr(), att.Reader)
		done <- err
	}()
	// Whatever ended the wait, no process of the call may go on.
	stop := func() { s.kill(cli, id, marker) }
	select {
	case err = <-done:
		stop()
	case <-ctx.Done():
		stop()
		att.Close()
		<-done
		return out.String(), -1, ctx.Err()
	}
	if err != nil && err != io.EOF {
		return out.String(), -1, fmt.Errorf("read the command's output: %w", err)
	}
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	ins, err := cli.ExecInspect(ictx, made.ID, client.ExecInspectOptions{})
	if err != nil {
		return out.String(), -1, fmt.Errorf("read the command's exit code: %w", err)
	}
	return out.String(), ins.ExitCode, nil
}

// kill kills every process of the call marked marker, in an exec of its own.
func (s *shell) kill(cli *client.Client, id, marker string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	made, err := cli.ExecCreate(ctx, id, client.ExecCreateOptions{
		User: s.b.c.User, Cmd: []string{"/bin/sh", "-c", killScript, "kill", markerVar + "=" + marker},
	})
	if err != nil {
		return
	}
	att, err := cli.ExecAttach(ctx, made.ID, client.ExecAttachOptions{})
	if err != nil {
		return
	}
	defer att.Close()
	_, _ = io.Copy(io.Discard, att.Reader)
}

func newMarker() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
