package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/internal/testbin"
	"github.com/trellis-run/trellis/version"
)

// binary is the trellisd binary TestMain builds.
var binary string

func TestMain(m *testing.M) {
	var err error
	if binary, err = testbin.Path(testbin.Trellisd); err != nil {
		fmt.Fprintln(os.Stderr, "building trellisd:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestCommandLine pins what trellisd prints for --version, --help and a
// bad flag, and its exit status, without starting a daemon: a bad flag is
// one line naming it (not the whole usage), with -flag and --flag alike.
func TestCommandLine(t *testing.T) {
	tests := []struct {
		args           []string
		code           int
		stdout, stderr string // whole; stderr "*" = any
		stderrHas      string
	}{
		{args: []string{"--version"}, stdout: "trellisd " + version.Server + " (protocol " + version.Protocol + ")\n"},
		{args: []string{"-version"}, stdout: "trellisd " + version.Server + " (protocol " + version.Protocol + ")\n"},
		{args: []string{"--bogus"}, code: 2, stderr: "trellisd: flag provided but not defined: -bogus (trellisd --help lists the flags)\n"},
		{args: []string{"-bogus"}, code: 2, stderr: "trellisd: flag provided but not defined: -bogus (trellisd --help lists the flags)\n"},
		{args: []string{"--port", "x"}, code: 2, stderr: `trellisd: invalid value "x" for flag -port: parse error (trellisd --help lists the flags)` + "\n"},
		{args: []string{"--help"}, stderr: "*", stderrHas: "\n  -provider string\n"},
		{args: []string{"--port", "0", "serve"}, code: 2, stderr: `trellisd: unexpected argument "serve": the daemon takes flags only (trellisd --help lists them)` + "\n"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, tc.args...)
			cmd.Env = append(os.Environ(), "TRELLIS_HOME="+t.TempDir())
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || stdout.String() != tc.stdout || (tc.stderr != "*" && stderr.String() != tc.stderr) || !strings.Contains(stderr.String(), tc.stderrHas) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr %q (containing %q)", code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderr, tc.stderrHas)
			}
		})
	}
}
