package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestTextGolden")

// What differs from run to run: ids, and token counts (the system prompt
// holds the temporary workdir's path).
var (
	sessionIDs = regexp.MustCompile(`s-[0-9a-f]{6,}`)
	clientIDs  = regexp.MustCompile(`\bc-[0-9a-f]{6,}`)
	tokens     = regexp.MustCompile(`\d+ tokens in, \d+ out`)
	workdirs   = regexp.MustCompile(`workdir /\S+`)
)

func normalize(s string) string {
	s = sessionIDs.ReplaceAllString(s, "s-ID")
	s = clientIDs.ReplaceAllString(s, "c-ID")
	s = workdirs.ReplaceAllString(s, "workdir DIR")
	return tokens.ReplaceAllString(s, "N tokens in, N out")
}

// TestTextGolden pins what `trellis run` shows in text mode, stdout and
// stderr together as a terminal would show them (without colour: they are
// not terminals): a shell call with its output cut to its first lines, a
// write and an edit with their diffs, a denied call in one line, a provider
// error — and the exit status of each. go test -run TestTextGolden -update
// rewrites testdata/golden/.
func TestTextGolden(t *testing.T) {
	e := newEnv(t)
	if r := e.run("", "run", "hello"); r.code != 0 { // starts the daemon
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	tests := []struct {
		name string
		args []string
	}{
		{"shell", []string{"run", "--approve", "allow", "count"}},
		{"write", []string{"run", "write notes"}},
		{"edit", []string{"run", "edit notes"}},
		{"denied", []string{"run", "--approve", "deny", "run ls"}},
		{"provider-error", []string{"run", "fail"}},
		{"quiet", []string{"run", "--quiet", "hello"}},
		{"plan-mode", []string{"run", "--permission-mode", "plan", "write notes"}}, // a write refused by the mode
		{"sessions-show", []string{"sessions", "show", "EDIT"}},                    // the edit run's session
	}
	var editSession string
	for _, tc := range tests {
		if tc.name == "sessions-show" {
			tc.args[2] = editSession
		}
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := e.command(ctx, tc.args...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out // one pipe: the order a terminal shows
			err := cmd.Run()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if tc.name == "edit" {
				editSession = sessionIDs.FindString(out.String())
			}
			got := normalize(fmt.Sprintf("$ trellis %s\n%s[exit %d]\n", shellWords(tc.args), out.String(), code))
			path := filepath.Join("testdata", "golden", tc.name+".txt")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Fatalf("output differs from %s:\n--- got\n%s--- want\n%s", path, got, want)
			}
		})
	}
}

func shellWords(args []string) string {
	var b bytes.Buffer
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if regexp.MustCompile(`^[-a-zA-Z0-9_./=]+$`).MatchString(a) {
			b.WriteString(a)
		} else {
			fmt.Fprintf(&b, "%q", a)
		}
	}
	return b.String()
}
