package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/internal/testcert"
)

// TestContainerImage runs the container image that .ci/run builds
// (tools/ociimage; its archive in $TRELLIS_TEST_IMAGE) in a container
// engine: it starts on its defaults with a TLS pair given as secrets,
// answers /health, runs a turn with the image's own CLI, and stops on
// SIGTERM. It skips, saying why, without the archive or an engine that can
// run containers on this machine.
func TestContainerImage(t *testing.T) {
	archive := os.Getenv("TRELLIS_TEST_IMAGE")
	if archive == "" {
		t.Skip("no image to run: .ci/run builds one (tools/ociimage) and sets TRELLIS_TEST_IMAGE to its archive")
	}
	engine, err := exec.LookPath("podman")
	if err != nil {
		if engine, err = exec.LookPath("docker"); err != nil {
			t.Skip("no container engine (podman or docker) on this machine")
		}
	}
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, engine, args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return strings.TrimSpace(out.String()), err
	}
	loaded, err := run("load", "-i", archive)
	if err != nil {
		t.Skipf("%s cannot load images here: %s", engine, loaded)
	}
	// podman names a loaded image without a registry localhost/…; docker
	// keeps the bare name (its "localhost/…" would be another registry's).
	image := "trellis:ci"
	if filepath.Base(engine) == "podman" {
		image = "localhost/trellis:ci"
	}
	if !strings.Contains(loaded, "trellis:ci") {
		t.Fatalf("%s load: %s, want the image trellis:ci", engine, loaded)
	}
	t.Cleanup(func() { _, _ = run("rmi", "-f", image) })

	secrets := t.TempDir()
	testcert.Write(t, filepath.Join(secrets, "tls.crt"), filepath.Join(secrets, "tls.key"))
	// The image's user is not root: it reads the key of this test's
	// throwaway pair, in a directory it may enter.
	for _, p := range []string{secrets, filepath.Join(secrets, "tls.crt"), filepath.Join(secrets, "tls.key")} {
		// The test's temporary directory is the runner's alone (0700).
		mode := os.FileMode(0o644)
		if p == secrets {
			mode = 0o755
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	name := fmt.Sprintf("trellis-e2e-%d", port)
	out, err := run("run", "-d", "--name", name, "-p", fmt.Sprintf("127.0.0.1:%d:8420", port),
		"-v", secrets+":/run/secrets:ro", image)
	if err != nil {
		_, _ = run("rm", "-f", name)
		if strings.Contains(out, "OCI") {
			t.Skipf("%s cannot run containers on this machine: %s", engine, out)
		}
		t.Fatalf("%s run: %s", engine, out)
	}
	t.Cleanup(func() { _, _ = run("rm", "-f", name) })

	pem, err := os.ReadFile(filepath.Join(secrets, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := hc.Get(fmt.Sprintf("https://127.0.0.1:%d/health", port))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			logs, _ := run("logs", name)
			t.Fatalf("the container's /health never answered 200 (last: %v)\nlogs:\n%s", err, logs)
		}
	}
	answer, err := run("exec", name, "/usr/local/bin/trellis", "--home", "/data", "run", "hello")
	if err != nil || !strings.Contains(answer, "offline demo model") {
		t.Fatalf("trellis run hello in the container: %v\n%s", err, answer)
	}
	if out, err := run("stop", "-t", "30", name); err != nil {
		t.Fatalf("%s stop: %s", engine, out)
	}
	if code, _ := run("inspect", "-f", "{{.State.ExitCode}}", name); code != "0" {
		logs, _ := run("logs", name)
		t.Fatalf("the daemon exited %s on SIGTERM\nlogs:\n%s", code, logs)
	}
}
