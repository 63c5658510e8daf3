package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// replWrapArg makes the test binary run replWrap instead of the tests.
const replWrapArg = "trellis-test-repl-wrap"

// replWrap runs argv on this terminal and writes how it ended to
// statusFile ("<exit code> <state>"). tmux's own record of a dead pane's
// exit status (pane_dead_status) is sometimes left empty when the pane's
// terminal closes before its process is reaped, so the pane's process is
// this wrapper and the status comes from here. The terminal's Ctrl-C is for
// the child: the wrapper catches SIGINT and ignores it.
func replWrap(statusFile string, argv []string) {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, os.Interrupt)
	go func() {
		for range sig {
		}
	}()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	status := "-1 did not start"
	if err := cmd.Run(); cmd.ProcessState != nil {
		status = fmt.Sprintf("%d %s", cmd.ProcessState.ExitCode(), cmd.ProcessState)
	} else if err != nil {
		status = "-1 " + err.Error()
	}
	// Written whole, then renamed: the test never reads half of it.
	err := os.WriteFile(statusFile+".part", []byte(status), 0o600)
	if err == nil {
		err = os.Rename(statusFile+".part", statusFile)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// tmuxPane drives one program in a detached tmux session.
type tmuxPane struct {
	t      *testing.T
	socket string
}

func (p *tmuxPane) tmux(args ...string) string {
	p.t.Helper()
	cmd := exec.Command("tmux", append([]string{"-L", p.socket}, args...)...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (p *tmuxPane) screen() string {
	return p.tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", "chat")
}

func (p *tmuxPane) send(keys ...string) {
	p.tmux(append([]string{"send-keys", "-t", "chat"}, keys...)...)
}

// typeLine types text literally, then Enter.
func (p *tmuxPane) typeLine(text string) {
	p.tmux("send-keys", "-t", "chat", "-l", text)
	p.send("Enter")
}

// waitFor waits until the screen holds want at least n times.
func (p *tmuxPane) waitFor(want string, n int) string {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := p.screen()
		if strings.Count(s, want) >= n {
			return s
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the screen does not show %q %d time(s):\n%s", want, n, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestChatREPL drives `trellis chat` on a real terminal (tmux): a prompt,
// Up to recall it, a multi-line prompt (a line ending with \), Ctrl-C during
// a turn (the turn stops, the REPL goes on), an approval answered at the
// prompt, Ctrl-R history search, Tab completion of /quit, and the history
// kept in the home for the next run.
func TestChatREPL(t *testing.T) {
	e := newEnv(t)
	p, statusFile, id := startChatPane(t, e)

	p.typeLine("hello")
	p.waitFor("Hello from the test script", 1)
	p.send("Up") // history recall
	p.waitFor("> hello", 2)
	p.send("Enter")
	p.waitFor("Hello from the test script", 2)

	p.typeLine(`first line\`) // multi-line prompt
	p.waitFor("… ", 1)
	p.typeLine("second line")
	p.waitFor("Default answer.", 1)
	p.send("Up") // recalled as one entry, sent whole again
	p.waitFor("> first line␤second line", 1)
	p.send("Enter")
	p.waitFor("Default answer.", 2)

	p.typeLine("slow") // Ctrl-C during a turn interrupts it, not the REPL
	p.waitFor("thinking", 1)
	p.send("C-c")
	p.waitFor("the turn ended: interrupted", 1)
	p.typeLine("hello")
	p.waitFor("Hello from the test script", 3)

	p.typeLine("run ls") // an approval answered at the prompt
	p.waitFor("Allow? [y]es", 1)
	p.typeLine("y")
	p.waitFor("That was the shell.", 1)
	p.waitFor("│ from-shell", 1)

	p.send("C-r") // history search
	p.tmux("send-keys", "-t", "chat", "-l", "run l")
	p.waitFor("bck-i-search: run l", 1)
	p.send("Enter") // takes the match and runs it
	p.waitFor("Allow? [y]es", 2)
	p.typeLine("n")
	p.waitFor("denied", 1)

	p.tmux("send-keys", "-t", "chat", "-l", "/qu")
	p.send("Tab")
	p.waitFor("/quit", 1)
	p.send("Enter")
	waitExit(t, p, statusFile)

	r := e.run("", "sessions", "show", id)
	if strings.Count(r.stdout, "> first line\nsecond line") != 2 {
		t.Fatalf("the multi-line prompt, typed and recalled, did not arrive whole twice:\n%s", r.stdout)
	}
	hist, err := os.ReadFile(historyFile(e.home))
	if err != nil || !strings.Contains(string(hist), "hello\n") || !strings.Contains(string(hist), "run ls\n") || strings.Contains(string(hist), "\ny\n") ||
		!strings.Contains(string(hist), "\nfirst line␤second line\n") || strings.Contains(string(hist), "\nsecond line\n") {
		t.Fatalf("history file: %v\n%s", err, hist)
	}

	// The next run with --continue chats in the same session, with the
	// history of the last run: the multi-line prompt is still one entry.
	p2, statusFile2, id2 := startChatPane(t, e, "--continue")
	if id2 != id {
		t.Fatalf("trellis chat --continue chats in %s, want the workdir's last session %s", id2, id)
	}
	p2.send("C-r")
	p2.tmux("send-keys", "-t", "chat", "-l", "second")
	p2.waitFor("first line␤second line", 1)
	p2.send("Enter") // takes the match and runs it
	p2.waitFor("Default answer.", 1)
	p2.typeLine("/quit")
	waitExit(t, p2, statusFile2)
	if r := e.run("", "sessions", "show", id); strings.Count(r.stdout, "> first line\nsecond line") != 3 {
		t.Fatalf("after --continue the session does not hold the recalled prompt a third time:\n%s", r.stdout)
	}
	if st, err := os.Stat(historyFile(e.home)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("history file mode: %v %v", st.Mode(), err)
	}
}

// waitExit waits for trellis chat in p to exit 0 (after /quit).
func waitExit(t *testing.T, p *tmuxPane, statusFile string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st, err := os.ReadFile(statusFile)
		if err == nil && strings.HasPrefix(string(st), "0 ") {
			return
		} else if err == nil || time.Now().After(deadline) {
			t.Fatalf("trellis chat after /quit: ended %q (%v)\n%s", st, err, p.screen())
		}
	}
}

// startChatPane runs trellis chat in e on a tmux terminal (with the extra
// chat flags), waits for its first prompt, and returns the pane, the file
// its exit status goes to and the session id.
func startChatPane(t *testing.T, e *env, extra ...string) (p *tmuxPane, statusFile, id string) {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (.ci/run installs it): this test needs a terminal to drive trellis chat")
	}
	p = &tmuxPane{t: t, socket: fmt.Sprintf("trellis-test-%d-%d", os.Getpid(), time.Now().UnixNano())}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	statusFile = filepath.Join(t.TempDir(), "status")
	// The pane's process is this test binary as replWrap, which runs trellis
	// chat on the pane's terminal and writes its exit status to statusFile.
	chat := strings.Join(append([]string{self, replWrapArg, statusFile, binary, "--home", e.home, "--provider", "fake:" + e.script, "chat", "--workdir", e.dir}, extra...), " ")
	p.tmux("new-session", "-d", "-s", "chat", "-x", "160", "-y", "50", "sh", "-c", "exec "+chat)
	p.tmux("set-option", "-t", "chat", "remain-on-exit", "on")
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", p.socket, "kill-server").Run() })

	screen := p.waitFor("chatting in session", 1)
	id = regexp.MustCompile(`chatting in session (s-[0-9a-f]+)`).FindStringSubmatch(screen)[1]
	p.waitFor("> ", 1)
	return p, statusFile, id
}

// TestChatSteerAndQueueWhileTurnRuns: on a terminal, lines typed while a
// turn runs (its shell call blocked on a fifo the test writes) are read at
// once: /steer sends its text into the running turn, whose next model call
// answers it; a plain line is queued and runs after the turn; after
// /busy steer a plain line is steered too.
func TestChatSteerAndQueueWhileTurnRuns(t *testing.T) {
	e := newEnv(t)
	fifo := filepath.Join(e.dir, "go.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	var p *tmuxPane
	release := func() { t.Helper(); releaseFifo(t, fifo, p) }
	p, _, id := startChatPane(t, e)

	p.typeLine("wait for go")
	p.waitFor("Allow? [y]es", 1)
	p.typeLine("y")
	p.typeLine("/steer hello")
	p.waitFor("steered into the running turn", 1)
	p.typeLine("count")
	p.waitFor("queued; it runs after this turn", 1)
	p.tmux("send-keys", "-t", "chat", "-l", "and hello there")
	p.send("C-s") // the steer key: steered, not queued
	p.waitFor("steered into the running turn", 2)
	release()
	p.waitFor("Hello from the test script", 1) // the turn's next model call read the steered text
	p.waitFor("Allow? [y]es", 2)               // the queued prompt runs its own turn
	p.typeLine("n")
	p.waitFor("denied", 1)

	p.typeLine("/busy steer")
	p.waitFor("now steered into the running turn", 1)
	p.typeLine("wait for go")
	p.waitFor("Allow? [y]es", 3)
	p.typeLine("y")
	p.typeLine("hello again")
	p.waitFor("steered into the running turn", 4) // after /steer, Ctrl-S, /busy steer and this line
	release()
	p.waitFor("Hello from the test script", 2)

	r := e.run("", "sessions", "show", id, "--output", "events")
	if got := strings.Count(r.stdout, "turn.steered"); got != 3 {
		t.Fatalf("%d turn.steered events, want 3:\n%s", got, r.stdout)
	}
}

// TestChatTypeAheadKeptWhenTurnEnds: what is typed while a turn runs and
// not yet sent (no Enter, or the first line of a multi-line prompt) is kept
// when the turn ends, like a shell's typeahead: the prompt comes back showing
// it, with no key pressed, and the next Enter sends it whole, once. Ctrl-C
// at the prompt still drops the lines of a multi-line prompt typed so far.
// /quit typed while a turn runs leaves the chat at once.
func TestChatTypeAheadKeptWhenTurnEnds(t *testing.T) {
	e := newEnv(t)
	fifo := filepath.Join(e.dir, "go.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	p, statusFile, id := startChatPane(t, e)
	// The pane's output, all of it: what the line editor drew while the turn
	// ran is soon drawn over by the turn's status line, so the screen may
	// never show it.
	log := filepath.Join(t.TempDir(), "pane.log")
	p.tmux("pipe-pane", "-t", "chat", "-o", "cat >> "+log)
	// drawn waits until the pane's output holds want n times: the keys typed
	// were read.
	drawn := func(want string, n int) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			out, _ := os.ReadFile(log)
			if strings.Count(string(out), want) >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pane's output does not show %q %d time(s):\n%s", want, n, p.screen())
			}
		}
	}
	release := func() { t.Helper(); releaseFifo(t, fifo, p) }
	// afterTurn waits until the screen, below the last answer of a turn
	// that read the fifo, shows want.
	afterTurn := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			s := p.screen()
			if i := strings.LastIndex(s, "That was the shell."); i >= 0 && strings.Contains(s[i:], want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the turn the screen does not show %q:\n%s", want, s)
			}
		}
	}

	p.typeLine("wait for go")
	p.waitFor("Allow? [y]es", 1)
	p.typeLine("y")
	p.tmux("send-keys", "-t", "chat", "-l", "hel") // no Enter: the turn runs on
	drawn("> hel", 1)
	release()
	afterTurn("\n> hel") // the prompt is back with what was typed
	p.typeLine("lo")
	p.waitFor("Hello from the test script", 1)

	p.typeLine("wait for go")
	p.waitFor("Allow? [y]es", 2)
	p.typeLine("y")
	p.typeLine(`hello\`) // the first line of a multi-line prompt
	p.tmux("send-keys", "-t", "chat", "-l", "the")
	drawn("… the", 1)
	release()
	afterTurn("\n… the") // still the second line of that prompt
	p.typeLine("re")
	p.waitFor("Hello from the test script", 2)

	p.typeLine(`dropped\`) // Ctrl-C at the prompt drops the lines typed so far
	p.waitFor("> dropped\\", 1)
	p.send("C-c")
	p.waitFor("Ctrl-C again", 1)
	p.typeLine("hello")
	p.waitFor("Hello from the test script", 3)

	r := e.run("", "sessions", "show", id)
	if strings.Count(r.stdout, "> hello\nHello") != 2 || strings.Count(r.stdout, "> hello\nthere\nHello") != 1 || strings.Contains(r.stdout, "dropped") {
		t.Fatalf("the prompts typed while the turns ran did not arrive whole, once each, or the one dropped with Ctrl-C arrived:\n%s", r.stdout)
	}

	p.typeLine("wait for go")
	p.waitFor("Allow? [y]es", 3)
	p.typeLine("y")
	drawn("shell $ read l < go.fifo", 3) // the command runs: the approval is in
	p.typeLine("/quit")                  // while the turn waits on the fifo
	p.waitFor("left the chat", 1)
	waitExit(t, p, statusFile)
	release() // the turn goes on in the daemon
}

// TestSlashCompleter pins the completion of a first word starting with /.
func TestSlashCompleter(t *testing.T) {
	c := slashCompleter{names: func() []string { return []string{"/compact", "/help", "/quit", "/skill-x"} }}
	tests := []struct {
		line string
		want []string
	}{
		{"/q", []string{"uit "}},
		{"/", []string{"compact ", "help ", "quit ", "skill-x "}},
		{"/s", []string{"kill-x "}},
		{"hello /q", nil},
		{"/quit now", nil},
	}
	for _, tc := range tests {
		got, n := c.Do([]rune(tc.line), len([]rune(tc.line)))
		var gs []string
		for _, g := range got {
			gs = append(gs, string(g))
		}
		if strings.Join(gs, ",") != strings.Join(tc.want, ",") || (len(tc.want) > 0 && n != len([]rune(tc.line))) {
			t.Errorf("%q: got %q (%d)", tc.line, gs, n)
		}
	}
}

// releaseFifo lets the command of the pane p waiting on fifo go on, once it
// reads it (a non-blocking open fails with ENXIO until then): a command that
// never started fails the test with the screen instead of hanging it.
func releaseFifo(t *testing.T, fifo string, p *tmuxPane) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			fmt.Fprintln(f, "go")
			f.Close()
			return
		}
		if !errors.Is(err, syscall.ENXIO) || time.Now().After(deadline) {
			t.Fatalf("no command reads the fifo (%v):\n%s", err, p.screen())
		}
	}
}

// TestChatTypingKeepsTheAnswer: keys typed while an answer streams, its line
// not yet ended, do not erase what the line holds (the line editor drew its
// line where the answer was, cleaning it first), and the line sent with
// Enter shows, with what the chat says about it, below the answer's text.
// Every word of the answer the session holds is on the screen.
func TestChatTypingKeepsTheAnswer(t *testing.T) {
	e := newEnv(t)
	p, _, id := startChatPane(t, e)

	p.typeLine("paced") // one long line of text, a few words at a time
	p.waitFor("paced paced paced", 1)
	p.typeLine("abc") // typed, and sent, in the middle of the answer's line
	p.waitFor("queued; it runs after this turn", 1)
	p.send("C-c")
	p.waitFor("the turn ended: interrupted", 1)

	screen := p.screen()
	r := e.run("", "sessions", "show", id)
	if got, want := strings.Count(screen, "paced"), strings.Count(r.stdout, "paced"); got != want {
		t.Fatalf("the screen shows %d words of the answer, the session holds %d:\n%s\n\nsessions show:\n%s", got, want, screen, r.stdout)
	}
	if !regexp.MustCompile(`(?m)^> abc$`).MatchString(screen) {
		t.Fatalf("the line typed during the answer is not on a line of its own:\n%s", screen)
	}
}

// TestChatStdoutToAFile: with stdout in a file and the terminal on stdin
// and stderr, the line editor draws on stderr: the file holds the answers,
// never the prompt or what was typed.
func TestChatStdoutToAFile(t *testing.T) {
	e := newEnv(t)
	out := filepath.Join(t.TempDir(), "answers.txt")
	p, statusFile, _ := startChatPane(t, e, ">", out)
	p.typeLine("hello")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if b, _ := os.ReadFile(out); strings.Contains(string(b), "Hello from the test script") {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the answer did not reach the file:\n%s\n\nscreen:\n%s", b, p.screen())
		}
	}
	p.typeLine("/quit")
	waitExit(t, p, statusFile)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "> ") || strings.Contains(string(b), "/quit") || strings.Contains(string(b), "\x1b[") {
		t.Fatalf("the file holds the line editor's drawing:\n%q", b)
	}
}
