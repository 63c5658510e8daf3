package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sdkModules are the model SDKs the build tag trellis_lean leaves out.
var sdkModules = []string{"github.com/openai/openai-go/", "github.com/anthropics/anthropic-sdk-go/"}

// TestLeanBuild builds trellis with -tags trellis_lean (and -s -w; not
// -trimpath, which would recompile every package on a test machine):
// the binary has neither model SDK, still plays the offline demo model,
// is not lured to OpenAI by OPENAI_API_KEY, and refuses --provider openai
// with a message naming the build tag.
func TestLeanBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a second trellis binary (-tags trellis_lean, ~25 s)")
	}
	deps := func(tags ...string) string {
		out, err := exec.Command("go", append(append([]string{"list", "-deps"}, tags...), ".")...).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		return string(out)
	}
	full, lean := deps(), deps("-tags", "trellis_lean")
	for _, m := range sdkModules {
		if !strings.Contains(full, m) {
			t.Errorf("the default build lost %s (issue 20 wants the official SDKs)", m)
		}
		if strings.Contains(lean, m) {
			t.Errorf("-tags trellis_lean still compiles %s", m)
		}
	}
	// So are the browser tool's driver (chromedp, cdproto: the lean
	// build's tool answers browser_provider_unavailable), the Docker
	// Engine and ssh clients (backend.set {kind: docker|ssh} is
	// unsupported), the PostgreSQL driver and River's driver for it
	// (--store postgres://… is refused), the OpenTelemetry SDK and OTLP
	// exporters (tracing stays off, with a warning when the environment
	// asks for it), and the benchmarks (trellis bench says so): the
	// offline demo uses none of them, and each costs first-build CPU
	// (docs/performance.md).
	for _, m := range []string{"github.com/chromedp/", "github.com/moby/moby/client",
		"golang.org/x/crypto/ssh", "github.com/jackc/pgx/", "github.com/riverqueue/river/riverdriver/riverpgxv5",
		"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters/", "go.opentelemetry.io/contrib/",
		"github.com/trellis-run/trellis/bench\n"} {
		if !strings.Contains(full, m) || strings.Contains(lean, m) {
			t.Errorf("%s: want it in the default build and out of -tags trellis_lean", m)
		}
	}
	if strings.Contains(deps("-tags", "trellis_no_anthropic"), sdkModules[1]) {
		t.Errorf("-tags trellis_no_anthropic still compiles %s", sdkModules[1])
	}

	bin := filepath.Join(t.TempDir(), "trellis-lean")
	build := exec.Command("go", "build", "-tags", "trellis_lean", "-ldflags=-s -w", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags trellis_lean: %v\n%s", err, out)
	}
	run := func(home string, args ...string) result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--home", home}, args...)...)
		cmd.Dir = t.TempDir()
		// A key in the environment would make a full build use OpenAI; this
		// one has no OpenAI client and must ignore it.
		// Nor has it an OpenTelemetry exporter: a collector named in the
		// environment gets a warning in the daemon's log, not a failure.
		cmd.Env = append(cleanEnv(), "OPENAI_API_KEY=sk-test-not-used", "OPENAI_BASE_URL=http://127.0.0.1:9/v1",
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		r := result{stdout: stdout.String(), stderr: stderr.String()}
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return r
	}

	home := filepath.Join(t.TempDir(), "home")
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(home, "daemon.json")); err == nil {
			run(home, "stop")
		}
	})
	r := run(home, "run", "--approve", "deny", "hello")
	if r.code != 0 || !strings.Contains(r.stdout, "offline demo model") {
		t.Fatalf("the demo model on a lean build: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}

	if log, err := os.ReadFile(filepath.Join(home, "logs", "trellisd.log")); err != nil || !strings.Contains(string(log), "OpenTelemetry tracing; tracing is off") {
		t.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT on a lean build: no warning in the daemon's log (%v)", err)
	}

	r = run(filepath.Join(t.TempDir(), "home2"), "--provider", "openai:gpt-4.1", "run", "hello")
	if r.code != exitFailed {
		t.Errorf("--provider openai on a lean build: exit %d, want %d", r.code, exitFailed)
	}
	for _, want := range []string{"provider openai is not in this build", "trellis_lean", "this build has: fake"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("--provider openai on a lean build: stderr %q lacks %q", r.stderr, want)
		}
	}

	r = run(filepath.Join(t.TempDir(), "home3"), "daemon", "--store", "postgres://u@127.0.0.1:9/db")
	if r.code == 0 || !strings.Contains(r.stderr, "leaves the PostgreSQL driver out (-tags trellis_lean)") {
		t.Errorf("--store postgres on a lean build: exit %d, stderr %q", r.code, r.stderr)
	}
	r = run(home, "bench", "append")
	if r.code == 0 || !strings.Contains(r.stderr, "leaves the benchmarks out (-tags trellis_lean)") {
		t.Errorf("bench on a lean build: exit %d, stderr %q", r.code, r.stderr)
	}

	r = run(home, "--help")
	if !strings.Contains(r.stdout, "this build has only fake (openai, anthropic left out by build tags)") {
		t.Errorf("--help does not say what the build left out:\n%s", r.stdout)
	}
}
