package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/trellis-run/trellis/daemon"
)

// startSSHD runs a real OpenSSH server on a loopback port for the current
// (root) account, authorising one fresh client key. It returns the port, the
// client key file and a known_hosts file holding the server's real key.
func startSSHD(t *testing.T) (port int, keyPath, knownHosts string) {
	t.Helper()
	const sshd = "/usr/sbin/sshd"
	if _, err := os.Stat(sshd); err != nil {
		t.Skip("SKIP: /usr/sbin/sshd is absent (Debian package openssh-server; .ci/run installs it)")
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the sshd test runs the server as root on a loopback port; not root here")
	}
	dir := t.TempDir()
	writeKey := func(name string) ssh.PublicKey {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		block, err := ssh.MarshalPrivateKey(priv, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		sp, _ := ssh.NewPublicKey(pub)
		return sp
	}
	hostPub := writeKey("host_key")
	clientPub := writeKey("client_key")
	os.WriteFile(filepath.Join(dir, "authorized_keys"), ssh.MarshalAuthorizedKey(clientPub), 0o600)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := fmt.Sprintf("Port %d\nListenAddress 127.0.0.1\nHostKey %s\nAuthorizedKeysFile %s\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nPidFile %s\n",
		port, filepath.Join(dir, "host_key"), filepath.Join(dir, "authorized_keys"), filepath.Join(dir, "sshd.pid"))
	os.WriteFile(filepath.Join(dir, "sshd_config"), []byte(cfg), 0o600)
	os.MkdirAll("/run/sshd", 0o755) // privilege separation directory
	cmd := exec.Command(sshd, "-D", "-e", "-f", filepath.Join(dir, "sshd_config"))
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshd did not listen: %s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	knownHosts = filepath.Join(dir, "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize(fmt.Sprintf("127.0.0.1:%d", port))}, hostPub)
	os.WriteFile(knownHosts, []byte(line+"\n"), 0o600)
	return port, filepath.Join(dir, "client_key"), knownHosts
}

func TestSSHBackend(t *testing.T) {
	port, key, known := startSSHD(t)
	home := t.TempDir()
	script := filepath.Join(home, "script.json")
	os.WriteFile(script, []byte(`{"steps":[
 {"match":"write remote","tool_calls":[{"name":"write_file","arguments":{"path":"notes/hello.txt","content":"hi from the model"}}]},
 {"after_tool":"write_file","text":"Written."},
 {"match":"run remote","tool_calls":[{"name":"shell","arguments":{"command":"cat notes/hello.txt; echo; whoami; pwd"}}]},
 {"match":"escape","tool_calls":[{"name":"write_file","arguments":{"path":"../outside.txt","content":"x"}}]},
 {"after_tool":"shell","text":"Ran."}],"repeat":true}`), 0o600)
	d, err := daemon.Start(context.Background(), daemon.Config{Home: home, Provider: "fake:" + script})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	c := helloWS(t, d)
	a := &approver{reply: map[string]any{"decision": "allow"}}
	c.onRequest = a.handle
	ctx := context.Background()
	local := t.TempDir()
	remote := filepath.Join(t.TempDir(), "remote-work")
	os.MkdirAll(remote, 0o755)
	id := createSession(t, c, map[string]any{"workdir": local, "mode": "accept"})
	cfg := map[string]any{"host": "127.0.0.1", "port": port, "user": "root", "keyPath": key, "knownHostsPath": known, "workdir": remote}

	// A wrong host key is refused, and nothing changes.
	wrong := filepath.Join(t.TempDir(), "known_hosts")
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	op, _ := ssh.NewPublicKey(otherPub)
	os.WriteFile(wrong, []byte(knownhosts.Line([]string{knownhosts.Normalize(fmt.Sprintf("127.0.0.1:%d", port))}, op)+"\n"), 0o600)
	bad := map[string]any{}
	for k, v := range cfg {
		bad[k] = v
	}
	bad["knownHostsPath"] = wrong
	rerr := c.Call(ctx, "backend.set", map[string]any{"sessionId": id, "kind": "ssh", "config": bad}, nil)
	if rerr == nil || !strings.Contains(rerr.Message, "does not match") || !strings.Contains(rerr.Message, "refused") {
		t.Fatalf("wrong host key: %v", rerr)
	}

	if err := c.Call(ctx, "backend.set", map[string]any{"sessionId": id, "kind": "ssh", "config": cfg}, nil); err != nil {
		t.Fatalf("backend.set ssh: %v", err)
	}
	evs := collect(t, c.Events(id), "backend.changed", 1)
	b := findKind(evs, "backend.changed")[0]["backend"].(map[string]any)
	if b["kind"] != "ssh" || b["host"] != "127.0.0.1" || b["workdir"] != remote {
		t.Fatalf("backend.changed %v", b)
	}

	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "write remote"}, nil)
	evs = collect(t, c.Events(id), "turn.done", 1)
	if res := findKind(evs, "tool.result"); len(res) != 1 || res[0]["ok"] != true {
		t.Fatalf("remote write_file: %v", res)
	}
	if got, err := os.ReadFile(filepath.Join(remote, "notes", "hello.txt")); err != nil || string(got) != "hi from the model" {
		t.Fatalf("remote file: %q %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(local, "notes")); err == nil {
		t.Fatal("write_file wrote in the local workdir")
	}

	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "run remote"}, nil)
	evs = collect(t, c.Events(id), "turn.done", 1)
	res := findKind(evs, "tool.result")
	if len(res) != 1 || res[0]["ok"] != true {
		t.Fatalf("remote shell: %v", res)
	}
	out := res[0]["output"].(string)
	if !strings.Contains(out, "hi from the model\nroot\n"+remote) || !strings.Contains(out, "[exit code 0]") {
		t.Fatalf("remote shell output %q", out)
	}
	if len(findKind(evs, "tool.progress")) == 0 {
		t.Fatal("remote shell streamed no tool.progress")
	}

	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "escape"}, nil)
	evs = collect(t, c.Events(id), "turn.done", 1)
	if res := findKind(evs, "tool.result"); len(res) != 1 || res[0]["ok"] != false || !strings.Contains(res[0]["output"].(string), "outside the remote workdir") {
		t.Fatalf("escape: %v", res)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(remote), "outside.txt")); err == nil {
		t.Fatal("write_file escaped the remote workdir")
	}
}
