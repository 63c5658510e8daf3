package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	docker "github.com/moby/moby/client"

	"github.com/trellis-run/trellis/runtime/tool/dockerbackend"
)

// dockerImage is the image the docker tests make their containers from.
const dockerImage = "trellis-e2e-busybox:latest"

// dockerEngine returns a client of the machine's Docker Engine holding
// dockerImage, imported from a root file system of Debian's static busybox
// (no registry is reached). It skips, saying why, when there is no engine
// or no static busybox (.ci/run installs docker.io and busybox-static and
// starts dockerd).
func dockerEngine(t *testing.T) *docker.Client {
	t.Helper()
	cli, err := docker.New(docker.FromEnv)
	if err != nil {
		t.Skipf("no Docker Engine client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, docker.PingOptions{NegotiateAPIVersion: true}); err != nil {
		t.Skipf("no Docker Engine answers (%v): .ci/run installs docker.io and starts dockerd", err)
	}
	const busybox = "/bin/busybox"
	if f, err := elf.Open(busybox); err != nil {
		t.Skipf("no %s to make the test image from (apt-get install busybox-static): %v", busybox, err)
	} else {
		static := true
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				static = false
			}
		}
		f.Close()
		if !static {
			t.Skipf("%s is linked dynamically: the test image needs Debian's busybox-static", busybox)
		}
	}
	list, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		t.Fatalf("busybox --list: %v", err)
	}
	bin, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	var root bytes.Buffer
	tw := tar.NewWriter(&root)
	add := func(h *tar.Header, body []byte) {
		h.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"bin/", "tmp/", "etc/"} {
		add(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	}
	add(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))}, bin)
	for _, applet := range strings.Fields(string(list)) {
		if applet != "busybox" {
			add(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}, nil)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	ictx, icancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer icancel()
	rc, err := cli.ImageImport(ictx, docker.ImageImportSource{Source: &root, SourceName: "-"}, dockerImage, docker.ImageImportOptions{})
	if err != nil {
		t.Fatalf("import the test image: %v", err)
	}
	io.Copy(io.Discard, rc)
	rc.Close()
	t.Cleanup(func() {
		_, _ = cli.ImageRemove(context.Background(), dockerImage, docker.ImageRemoveOptions{Force: true})
	})
	return cli
}

// containersOf lists the containers labelled label=value.
func containersOf(t *testing.T, cli *docker.Client, label, value string) []string {
	t.Helper()
	list, err := cli.ContainerList(context.Background(), docker.ContainerListOptions{All: true,
		Filters: docker.Filters{}.Add("label", label+"="+value)})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

// inContainer runs a command in container id and returns its output.
func inContainer(t *testing.T, cli *docker.Client, id, command string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	made, err := cli.ExecCreate(ctx, id, docker.ExecCreateOptions{Cmd: []string{"/bin/sh", "-c", command}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	att, err := cli.ExecAttach(ctx, made.ID, docker.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	defer att.Close()
	out, _ := io.ReadAll(att.Reader)
	return string(out)
}

// TestDockerBackend runs a session's shell in a container of its own: the
// command sees the container (no network but loopback), writes into the
// workdir the daemon sees, is killed with everything it started on
// interrupt, and no container outlives the session, a kill -9 and restart
// of the daemon, or a daemon's stop.
func TestDockerBackend(t *testing.T) {
	cli := dockerEngine(t)
	home := t.TempDir()
	script := `{"steps":[
 {"match":"run docker","tool_calls":[{"name":"shell","arguments":{"command":"uname -a; id; ls /; test -f /.dockerenv && echo in-a-container; echo net: $(ls /sys/class/net); pwd; echo made-inside > made.txt"}}]},
 {"match":"sleep docker","tool_calls":[{"name":"shell","arguments":{"command":"echo started; setsid sleep 302 & sleep 301"}}]},
 {"after_tool":"shell","text":"Ran."}],"repeat":true}`
	if err := os.WriteFile(filepath.Join(home, "script.json"), []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, home)
	c := dialInfo(t, p.info)
	ctx := context.Background()
	work := t.TempDir()
	id := createSession(t, c, map[string]any{"workdir": work, "mode": "auto"})

	// Bad configs are refused with the field named, and nothing changes.
	for _, bad := range []struct {
		config map[string]any
		want   string
	}{
		{map[string]any{}, "image is required"},
		{map[string]any{"image": dockerImage, "network": "host"}, `network "host" is not one of none, bridge`},
		{map[string]any{"image": dockerImage, "memoryMb": -5}, "memoryMb -5 is out of range"},
		{map[string]any{"image": dockerImage, "cpu": 2}, "unknown field"},
		{map[string]any{"image": "trellis-e2e-no-such-image:1"}, "is not on the engine"},
	} {
		err := c.Call(ctx, "backend.set", map[string]any{"sessionId": id, "kind": "docker", "config": bad.config}, nil)
		if err == nil || err.StringCode() != "invalid_params" || !strings.Contains(err.Message, bad.want) || !strings.Contains(err.Message, "nothing changed") {
			t.Errorf("backend.set docker %v: %v, want invalid_params saying %q", bad.config, err, bad.want)
		}
	}
	if err := c.Call(ctx, "backend.set", map[string]any{"sessionId": id, "kind": "docker", "config": map[string]any{"image": dockerImage}}, nil); err != nil {
		t.Fatalf("backend.set docker: %v", err)
	}
	evs := collect(t, c.Events(id), "backend.changed", 1)
	b := findKind(evs, "backend.changed")[0]["backend"].(map[string]any)
	if b["kind"] != "docker" || b["image"] != dockerImage || b["network"] != "none" {
		t.Fatalf("backend.changed %v", b)
	}

	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "run docker"}, nil)
	evs = collect(t, c.Events(id), "turn.done", 1)
	res := findKind(evs, "tool.result")
	if len(res) != 1 || res[0]["ok"] != true {
		t.Fatalf("shell in the container: %v", res)
	}
	out := fmt.Sprint(res[0]["output"])
	for _, want := range []string{"Linux", fmt.Sprintf("uid=%d", os.Getuid()), "in-a-container", "net: lo\n", work + "\n", "[exit code 0]"} {
		if !strings.Contains(out, want) {
			t.Errorf("shell output lacks %q:\n%s", want, out)
		}
	}
	if got, err := os.ReadFile(filepath.Join(work, "made.txt")); err != nil || string(got) != "made-inside\n" {
		t.Errorf("the file the command wrote, seen from the daemon: %q %v", got, err)
	}
	if len(findKind(evs, "tool.progress")) == 0 {
		t.Error("the command streamed no tool.progress")
	}
	boxes := containersOf(t, cli, dockerbackend.LabelSession, id)
	if len(boxes) != 1 {
		t.Fatalf("containers of the session: %v, want 1", boxes)
	}

	// Interrupted mid-sleep: the command and what it left (setsid) die.
	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "sleep docker"}, nil)
	waitStarted(t, c.Events(id))
	if err := c.Call(ctx, "session.interrupt", map[string]any{"sessionId": id}, nil); err != nil {
		t.Fatal(err)
	}
	evs = collect(t, c.Events(id), "turn.done", 1)
	res = findKind(evs, "tool.result")
	if len(res) != 1 || res[0]["ok"] != false || !strings.Contains(fmt.Sprint(res[0]["error"]), "interrupted") {
		t.Fatalf("interrupted shell: %v", res)
	}
	if ps := inContainer(t, cli, boxes[0], `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done`); strings.Contains(ps, "sleep 30") {
		t.Errorf("processes of the interrupted command are left in the container:\n%s", ps)
	}

	// Plan mode keeps commands off the network: with network bridge the
	// call is refused and no container is made for it.
	idPlan := createSession(t, c, map[string]any{"workdir": work, "mode": "plan"})
	if err := c.Call(ctx, "backend.set", map[string]any{"sessionId": idPlan, "kind": "docker", "config": map[string]any{"image": dockerImage, "network": "bridge"}}, nil); err != nil {
		t.Fatalf("backend.set docker bridge: %v", err)
	}
	c.Call(ctx, "session.prompt", map[string]any{"sessionId": idPlan, "text": "run docker"}, nil)
	// Plan mode asks before a command: allowed from the queue.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var list struct {
			Requests []struct {
				RequestID string `json:"requestId"`
			} `json:"requests"`
		}
		if err := c.Call(ctx, "approval.list", map[string]any{"sessionId": idPlan}, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Requests) > 0 {
			if err := c.Call(ctx, "approval.respond", map[string]any{"requestId": list.Requests[0].RequestID, "decision": "allow"}, nil); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the plan-mode command was never put to approval")
		}
	}
	evs = collect(t, c.Events(idPlan), "turn.done", 1)
	res = findKind(evs, "tool.result")
	if len(res) != 1 || res[0]["ok"] != false || !strings.Contains(fmt.Sprint(res[0]["error"]), "plan mode runs commands without network") {
		t.Errorf("a plan-mode command in a bridge-network container: %v", res)
	}
	if left := containersOf(t, cli, dockerbackend.LabelSession, idPlan); len(left) != 0 {
		t.Errorf("containers of the plan-mode session: %v", left)
	}

	// Closed: the container goes.
	if err := c.Call(ctx, "session.close", map[string]any{"sessionId": id}, nil); err != nil {
		t.Fatal(err)
	}
	if left := containersOf(t, cli, dockerbackend.LabelSession, id); len(left) != 0 {
		t.Errorf("containers after session.close: %v", left)
	}

	// kill -9 leaves the container; the restarted daemon removes it
	// before it serves, and the session gets a new one.
	id2 := createSession(t, c, map[string]any{"workdir": work, "mode": "auto"})
	if err := c.Call(ctx, "backend.set", map[string]any{"sessionId": id2, "kind": "docker", "config": map[string]any{"image": dockerImage}}, nil); err != nil {
		t.Fatal(err)
	}
	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id2, "text": "run docker"}, nil)
	collect(t, c.Events(id2), "turn.done", 1)
	before := containersOf(t, cli, dockerbackend.LabelSession, id2)
	if len(before) != 1 {
		t.Fatalf("containers of the second session: %v", before)
	}
	c.Close()
	p.kill()
	if left := containersOf(t, cli, dockerbackend.LabelSession, id2); len(left) != 1 {
		t.Fatalf("after kill -9 the container should still be there (nothing removed it): %v", left)
	}
	p2 := startProc(t, home)
	if left := containersOf(t, cli, dockerbackend.LabelSession, id2); len(left) != 0 {
		t.Errorf("the restarted daemon left the killed one's container: %v", left)
	}
	c2 := dialInfo(t, p2.info)
	c2.Call(ctx, "session.prompt", map[string]any{"sessionId": id2, "text": "run docker"}, nil)
	evs = collect(t, c2.Events(id2), "turn.done", 1)
	if res := findKind(evs, "tool.result"); len(res) != 1 || res[0]["ok"] != true {
		t.Fatalf("shell after the restart: %v", res)
	}
	after := containersOf(t, cli, dockerbackend.LabelSession, id2)
	if len(after) != 1 || after[0] == before[0] {
		t.Fatalf("containers after the restart: %v (before %v), want one new one", after, before)
	}

	// A daemon's stop removes its containers.
	c2.Close()
	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p2.cmd.Wait()
	if left := containersOf(t, cli, dockerbackend.LabelSession, id2); len(left) != 0 {
		t.Errorf("containers after the daemon stopped: %v", left)
	}
}
