//go:build !trellis_lean

package sshbackend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/trellis-run/trellis/runtime/tool"
)

// pgidTag starts the line a remote command prints first: the number of its
// process group, which a stop kills. The line is not part of the output.
const pgidTag = "trellis-pgid "

// shellCommand is the remote command line of a shell call. The remote
// account's shell may be any (csh, fish): it only execs sh, in which the
// rest runs. sshd makes each session's command a process group (and
// session) leader, so the group holds the command and everything it
// starts, except what leaves it with setsid.
func shellCommand(workdir, command string) string {
	script := `g=$$; [ -r /proc/$$/stat ] && read -r _ _ _ _ g _ </proc/$$/stat; echo "` + pgidTag + `$g"; ` +
		"cd -- " + quote(workdir) + ` && exec sh -c "$0"`
	return "exec sh -c " + quote(script) + " " + quote(command)
}

// pgidWriter passes a remote command's stdout on, minus its first line,
// which names the process group (shellCommand).
type pgidWriter struct {
	next interface{ Write([]byte) (int, error) }

	mu   sync.Mutex
	head []byte // the first line until its newline arrives
	done bool
	pgid int // 0 until known
}

func (w *pgidWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return w.next.Write(p)
	}
	w.head = append(w.head, p...)
	i := bytes.IndexByte(w.head, '\n')
	if i < 0 && len(w.head) < 64 {
		w.mu.Unlock()
		return len(p), nil
	}
	var rest []byte
	if i >= 0 {
		line := string(w.head[:i])
		if n, err := strconv.Atoi(strings.TrimPrefix(line, pgidTag)); err == nil && strings.HasPrefix(line, pgidTag) && n > 1 {
			w.pgid = n
			rest = w.head[i+1:]
		} else {
			rest = w.head // not the tag: all of it is output
		}
	} else {
		rest = w.head
	}
	w.done, w.head = true, nil
	w.mu.Unlock()
	if len(rest) > 0 {
		if _, err := w.next.Write(rest); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (w *pgidWriter) group() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pgid
}

// stopGrace is how long a stopped remote command's processes have between
// SIGTERM and SIGKILL.
const stopGrace = 200 * time.Millisecond

// stopGroup ends remote process group pgid over a session of its own:
// SIGTERM, then SIGKILL to what still runs after stopGrace. It says what
// happened, for the tool result.
func stopGroup(cl *ssh.Client, pgid int) string {
	if pgid <= 1 {
		return "its remote processes could not be found (the command had not said its process group yet); the ssh session was closed, which may not stop them"
	}
	g := strconv.Itoa(pgid)
	steps := int(stopGrace / (20 * time.Millisecond))
	// alive: a process of the group runs. kill -0 also finds zombies (a
	// killed leader until sshd reaps it), so /proc decides where it exists.
	script := `alive() { if [ -d /proc/self ]; then for s in /proc/[0-9]*/stat; do read -r l 2>/dev/null <"$s" || continue; ` +
		`set -- ${l##*) }; [ "$3" = ` + g + ` ] && [ "$1" != Z ] && return 0; done; return 1; fi; kill -0 -` + g + ` 2>/dev/null; }; ` +
		`kill -TERM -` + g + ` 2>/dev/null || { echo gone; exit 0; }; i=0; ` +
		`while [ $i -lt ` + strconv.Itoa(steps) + ` ] && alive; do sleep 0.02 2>/dev/null || break; i=$((i+1)); done; ` +
		`if alive; then kill -KILL -` + g + ` 2>/dev/null; i=0; while [ $i -lt 25 ] && alive; do sleep 0.02 2>/dev/null || break; i=$((i+1)); done; ` +
		`if alive; then echo left; else echo killed; fi; else echo termed; fi`
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _, err := run(ctx, cl, "exec sh -c "+quote(script), nil, nil)
	// The answer is the last line (the shell may have said more on stderr).
	answer := strings.TrimSpace(out)
	if i := strings.LastIndexByte(answer, '\n'); i >= 0 {
		answer = answer[i+1:]
	}
	switch answer {
	case "gone":
		return "its remote process group " + g + " had ended already"
	case "termed":
		return "its remote process group " + g + " was ended by SIGTERM; none of it is left"
	case "killed":
		return fmt.Sprintf("its remote process group %s was ended (SIGKILL after the %s grace); none of it is left", g, stopGrace)
	case "left":
		return "its remote process group " + g + " still runs after SIGKILL"
	}
	if err == nil {
		err = errors.New("unexpected answer " + strconvQuote(out))
	}
	return "its remote process group " + g + " could not be stopped (" + err.Error() + "); it may still run"
}

func strconvQuote(s string) string {
	if len(s) > 100 {
		s = s[:100]
	}
	return strconv.Quote(s)
}

// runShell runs a shell call's command; on ctx's end it stops the
// command's whole remote process group and says how in stopped.
func runShell(ctx context.Context, cl *ssh.Client, workdir, command string, progress tool.ProgressFunc) (out string, code int, stopped string, err error) {
	s, err := cl.NewSession()
	if err != nil {
		return "", 0, "", fmt.Errorf("open an ssh session: %w", err)
	}
	defer s.Close()
	buf := tool.NewStreamedOutput(progress)
	pw := &pgidWriter{next: buf.Stdout()}
	s.Stdout = pw
	s.Stderr = buf.Stderr()
	done := make(chan error, 1)
	go func() { done <- s.Run(shellCommand(workdir, command)) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		stopped = stopGroup(cl, pw.group())
		_ = s.Signal(ssh.SIGKILL)
		s.Close()
		return buf.String(), -1, stopped, ctx.Err()
	}
	var exit *ssh.ExitError
	if errors.As(err, &exit) {
		return buf.String(), exit.ExitStatus(), "", nil
	}
	if err != nil {
		return buf.String(), -1, "", err
	}
	return buf.String(), 0, "", nil
}
