package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// upgradeScript answers "hello" at once and streams "stream" for a few
// seconds, long enough to span a daemon's replacement.
var upgradeScript = fmt.Sprintf(`{"steps":[
 {"match":"hello","text":"Hello there.","repeat":1000},
 {"match":"stream","text":%q,"delaySec":4,"repeat":1000}
]}`, strings.Repeat("word ", 200))

// TestPostgresRollingUpgrade: three daemons of the earlier build on one
// database are replaced one at a time by this build, as a rolling upgrade
// does it (SIGTERM, then the new binary on the same home). While each one
// is replaced a turn streams on a session another daemon owns, watched
// through the third, and arrives whole; after each step every session is
// prompted through every daemon, so calls are forwarded from old to new
// daemons and back. At the end every stored log is seq 1..N once each,
// every turn closed once and complete, and the new daemons logged that they
// ran beside another version.
//
// The earlier build is the git ref $TRELLIS_UPGRADE_FROM, else the previous
// commit (HEAD~1); without git or that commit (a shallow clone, a source
// archive) the test skips and says why.
func TestPostgresRollingUpgrade(t *testing.T) {
	server := pgtest.Server(t)
	if testing.Short() {
		t.Skip("builds the earlier trellisd")
	}
	from, oldBin := buildEarlierTrellisd(t)
	dsn := pgtest.FreshDatabase(t, server)
	args := []string{"--store", dsn, "--lease", clusterLease.String()}

	homes := make([]string, 3)
	procs := make([]*proc, 3)
	clients := make([]*grpcClient, 3)
	for i := range homes {
		homes[i] = t.TempDir()
		if err := os.WriteFile(filepath.Join(homes[i], "script.json"), []byte(upgradeScript), 0o600); err != nil {
			t.Fatal(err)
		}
		procs[i] = startProcBin(t, oldBin, homes[i], args...)
		clients[i] = dialInfo(t, procs[i].info)
	}
	t.Logf("three daemons of %s; this build replaces them one at a time", from)

	var sessions []string
	for _, c := range clients {
		sessions = append(sessions, createSession(t, c, nil))
	}
	turns := 0
	promptEverywhere := func(step string) {
		t.Helper()
		for j, c := range clients {
			for _, id := range sessions {
				turnID := promptRetrying(t, c, id, "hello")
				evs := untilTurnDone(t, c.Events(id), turnID)
				if r := payloadOf(evs[len(evs)-1])["reason"]; r != "complete" {
					t.Fatalf("%s: the turn prompted through daemon %d ended %v", step, j, r)
				}
				turns++
			}
		}
	}
	promptEverywhere("before the upgrade")

	for k := range procs {
		// A turn streams on a session daemon o owns, watched through w,
		// while daemon k is replaced.
		o, w := (k+1)%3, (k+2)%3
		id := createSession(t, clients[o], nil)
		sessions = append(sessions, id)
		var res struct {
			Events []map[string]any `json:"events"`
		}
		if err := clients[w].Call(context.Background(), "session.resume", map[string]any{"sessionId": id}, &res); err != nil {
			t.Fatalf("resume through daemon %d: %v", w, err)
		}
		turnID := promptRetrying(t, clients[o], id, "stream")
		watched := collect(t, clients[w].Events(id), "message.delta", 1)

		if err := procs[k].cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := procs[k].cmd.Wait(); err != nil {
			t.Fatalf("daemon %d of %s on SIGTERM: %v", k, from, err)
		}
		procs[k] = startProcBin(t, trellisdBin, homes[k], args...)
		clients[k] = dialInfo(t, procs[k].info)

		watched = append(watched, untilTurnDone(t, clients[w].Events(id), turnID)...)
		text := ""
		for i, ev := range watched {
			if i > 0 && seqOf(ev) != seqOf(watched[i-1])+1 {
				t.Fatalf("step %d: the watcher on daemon %d saw seq %d after %d", k, w, seqOf(ev), seqOf(watched[i-1]))
			}
			if ev["kind"] == "message.delta" {
				text += fmt.Sprint(payloadOf(ev)["text"])
			}
		}
		if r := payloadOf(watched[len(watched)-1])["reason"]; r != "complete" || text != strings.Repeat("word ", 200) {
			t.Fatalf("step %d: the streamed turn ended %v with %d of %d characters", k, r, len(text), len(strings.Repeat("word ", 200)))
		}
		turns++
		promptEverywhere(fmt.Sprintf("after replacing daemon %d", k))
		t.Logf("daemon %d replaced: a turn streamed whole across it; %d sessions prompted through each daemon", k, len(sessions))
	}

	db := clusterDB(t, dsn)
	closed := 0
	for _, id := range sessions {
		evs := storedEvents(t, db, id)
		done := map[string]int{}
		for i, ev := range evs {
			if ev.seq != int64(i+1) {
				t.Fatalf("session %s: seq %d at position %d", id, ev.seq, i)
			}
			if ev.kind == "turn.done" {
				done[ev.turnID]++
				if done[ev.turnID] > 1 || ev.reason != "complete" {
					t.Fatalf("session %s: turn %s closed again or not complete (%s)", id, ev.turnID, ev.reason)
				}
				closed++
			}
		}
	}
	if closed != turns {
		t.Fatalf("%d turns closed in the stored logs, %d prompted", closed, turns)
	}
	for k, home := range homes {
		log, err := os.ReadFile(daemon.LogPath(home))
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 && !strings.Contains(string(log), "a daemon of another trellisd version is running") {
			t.Errorf("the first new daemon did not log that it runs beside %s", from)
		}
	}
	t.Logf("rolling upgrade from %s: %d turns over %d sessions, every stored log gap-free, every turn closed once", from, turns, len(sessions))
}

// buildEarlierTrellisd builds trellisd from the earlier commit (a git
// archive of it, so the checkout is untouched), with its version set to
// say which, and returns the commit's name and the binary.
func buildEarlierTrellisd(t *testing.T) (string, string) {
	t.Helper()
	ref := os.Getenv("TRELLIS_UPGRADE_FROM")
	if ref == "" {
		ref = "HEAD~1"
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout (%v): no earlier build to upgrade from", err)
	}
	root := strings.TrimSpace(string(top))
	sha, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "-q", ref+"^{commit}").Output()
	if err != nil {
		t.Skipf("%s is not in this clone (a shallow clone?): no earlier build to upgrade from", ref)
	}
	commit := strings.TrimSpace(string(sha))[:12]
	src := t.TempDir()
	archive := exec.Command("git", "-C", root, "archive", commit)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v", commit, err)
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("untar %s: %v", commit, err)
	}
	bin := filepath.Join(t.TempDir(), "trellisd-"+commit)
	version := "0.1.0-dev+" + commit
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X github.com/trellis-run/trellis/version.Server="+version, "./cmd/trellisd")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build trellisd of %s: %v\n%s", commit, err, out)
	}
	return fmt.Sprintf("%s (trellisd %s)", ref, version), bin
}

// promptRetrying prompts id through c, retrying while the cluster answers
// overloaded (a lease changing hands as a daemon stops) as retryAfterMs
// says, and returns the turn id.
func promptRetrying(t *testing.T, c *grpcClient, id, text string) string {
	t.Helper()
	for attempt := 0; ; attempt++ {
		var turn struct {
			TurnID string `json:"turnId"`
		}
		err := c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": text}, &turn)
		if err == nil {
			return turn.TurnID
		}
		if err.StringCode() != errcode.Overloaded || attempt == 20 {
			t.Fatalf("prompt %s: %v", id, err)
		}
		wait, _ := err.Data["retryAfterMs"].(float64)
		time.Sleep(time.Duration(max(wait, 50)) * time.Millisecond)
	}
}

// untilTurnDone reads ch until the turn.done of turnID (events of other
// turns of the session, prompted through other daemons, come first).
func untilTurnDone(t *testing.T, ch <-chan map[string]any, turnID string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for {
		evs := collect(t, ch, "turn.done", 1)
		out = append(out, evs...)
		if payloadOf(evs[len(evs)-1])["turnId"] == turnID {
			return out
		}
	}
}
