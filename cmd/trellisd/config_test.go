package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// trellisd runs the binary with args, in dir, with env added to an
// environment cleared of TRELLIS_ variables, and returns what it printed
// and its exit status.
func trellisd(t *testing.T, dir string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TRELLIS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// writeFile writes content to dir/name and returns name.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestConfigPrecedence pins which source a value comes from, through
// trellisd config print: the flag beats the environment variable, which
// beats the file, which beats the default.
func TestConfigPrecedence(t *testing.T) {
	const file = `
port = 7100
log-level = "warn"
provider = "fake:file.json"
store = "sqlite"
lease = "30s"
`
	tests := []struct {
		name string
		env  []string
		args []string
		want map[string]any
	}{
		{name: "file over defaults",
			want: map[string]any{"port": int64(7100), "log-level": "warn", "provider": "fake:file.json", "lease": "30s", "grpc-port": int64(0), "approval-timeout": "5m0s"}},
		{name: "environment over file", env: []string{"TRELLIS_PROVIDER=fake:env.json", "TRELLIS_STORE=postgres://db.example/trellis"},
			want: map[string]any{"provider": "fake:env.json", "store": "postgres://db.example/trellis", "port": int64(7100)}},
		{name: "flags over environment and file", env: []string{"TRELLIS_PROVIDER=fake:env.json"}, args: []string{"--provider", "fake:flag.json", "--port", "7200", "--log-level", "debug"},
			want: map[string]any{"provider": "fake:flag.json", "port": int64(7200), "log-level": "debug"}},
		{name: "a flag given its default value still beats the file", args: []string{"--log-level", "info", "--port", "0"},
			want: map[string]any{"log-level": "info", "port": int64(0)}},
		{name: "home from the environment over the file", env: []string{"TRELLIS_HOME=/srv/env-home"},
			want: map[string]any{"home": "/srv/env-home", "workspace-root": "/srv/env-home/workspaces", "workdir": ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "trellisd.toml", file+`home = "`+filepath.Join(dir, "file-home")+`"`+"\n")
			env := append([]string{"TRELLIS_HOME="}, tc.env...)
			stdout, stderr, code := trellisd(t, dir, env, append([]string{"config", "print", "--config", "trellisd.toml"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %s", code, stderr)
			}
			var got map[string]any
			if _, err := toml.Decode(stdout, &got); err != nil {
				t.Fatalf("config print wrote no TOML: %v\n%s", err, stdout)
			}
			for k, want := range tc.want {
				if got[k] != want {
					t.Errorf("%s = %#v, want %#v", k, got[k], want)
				}
			}
		})
	}
	t.Run("file home when no environment variable", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "trellisd.toml", `home = "`+filepath.Join(dir, "file-home")+`"`+"\n")
		stdout, stderr, code := trellisd(t, dir, nil, "config", "print", "--config", "trellisd.toml")
		if code != 0 || !strings.Contains(stdout, `home = "`+filepath.Join(dir, "file-home")+`"`) {
			t.Fatalf("exit %d, stderr %s, stdout:\n%s", code, stderr, stdout)
		}
	})
}

// TestConfigFileProblems pins the messages for a bad configuration file:
// each names the file, the line and the key; config check reports every
// problem at once (exit 1) and the daemon refuses to start with the same
// lines (exit 2).
func TestConfigFileProblems(t *testing.T) {
	const unknown = "unknown key (the keys are trellisd's flag names, at the top level; trellisd --help lists them)"
	tests := []struct {
		name, file string
		check      string // config check's stderr, whole
		start      string // trellisd --config's stderr, whole; "" = as check, each line after "trellisd: "
	}{
		{name: "unknown key", file: "port = 7300\ncolour = \"blue\"\n",
			check: "trellisd.toml:2: colour: " + unknown + "\n"},
		{name: "a table is an unknown key", file: "[tls]\ncert = \"c.pem\"\n",
			check: "trellisd.toml:1: tls: " + unknown + "\n"},
		{name: "wrong type", file: "# the port\n\nport = \"8080\"\n",
			check: "trellisd.toml:3: port: want an integer, not the string \"8080\"\n"},
		{name: "wrong type of a list", file: "allow-origin = \"https://a.example\"\n",
			check: "trellisd.toml:1: allow-origin: want an array of strings, not the string \"https://a.example\"\n"},
		{name: "values of other types", file: "lease = 10\nport = 1.5\nallow-origin = [1]\ntool-env = [\"GOPATH,GOCACHE\"]\nhome = { dir = \"/srv\" }\nworkdir = 2024-01-01\n",
			check: `trellisd.toml:1: lease: want a duration such as "90s" or "5m", not the integer 10
trellisd.toml:2: port: want an integer, not the number 1.5
trellisd.toml:3: allow-origin: want an array of strings, not an array holding the integer 1
trellisd.toml:4: tool-env: "GOPATH,GOCACHE" holds a comma: one value per string
trellisd.toml:5: home: want a string, not a table
trellisd.toml:6: workdir: want a string, not a date or time
`},
		{name: "bad duration", file: "lease = \"10 seconds\"\n",
			check: "trellisd.toml:1: lease: want a duration such as \"90s\" or \"5m\", not the string \"10 seconds\"\n"},
		{name: "bad value", file: "host = \"127.0.0.1\"\nport = 70000\n",
			check: "trellisd.toml:2: port 70000: out of range 0-65535\n"},
		{name: "bad durability", file: "durability = \"fast\"\n",
			check: "trellisd.toml:1: durability \"fast\": want sync (every commit fsynced) or batch (commits survive a crash of the daemon, a power loss may roll back the last ones)\n"},
		{name: "not TOML", file: "port = 1\nport 2\n",
			check: "trellisd.toml:2: not TOML: expected '.' or '=', but got '2' instead\n"},
		{name: "five mistakes, five lines", file: `port = "8080"
log-level = "loud"
max-in-flight = -1
colour = "blue"
lease = "10 seconds"
`, check: `trellisd.toml:1: port: want an integer, not the string "8080"
trellisd.toml:2: log-level "loud": want debug, info, warn or error
trellisd.toml:3: max-in-flight -1: want 0 (the default) or more
trellisd.toml:4: colour: ` + unknown + `
trellisd.toml:5: lease: want a duration such as "90s" or "5m", not the string "10 seconds"
`},
		{name: "files that must exist", file: "tls-cert = \"missing-cert.pem\"\ntls-key = \"missing-key.pem\"\nmcp-config = \"missing-mcp.json\"\nprovider = \"fake:missing-script.json\"\n",
			check: "trellisd.toml:1: tls-cert and tls-key: TLS: stat missing-cert.pem: no such file or directory\n" +
				"trellisd.toml:3: mcp-config: open missing-mcp.json: no such file or directory\n" +
				"trellisd.toml:4: provider: the fake provider's script: stat missing-script.json: no such file or directory\n",
			start: "trellisd: TLS: stat missing-cert.pem: no such file or directory\n"},
		{name: "a problem of a flag has no line", file: "port = 7300\n",
			check: "lease 500ms: want at least 1s\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "trellisd.toml", tc.file)
			env := []string{"TRELLIS_HOME=" + filepath.Join(dir, "home")}
			var extra []string
			if tc.name == "a problem of a flag has no line" {
				extra = []string{"--lease", "500ms"}
			}
			stdout, stderr, code := trellisd(t, dir, env, append([]string{"config", "check", "--config", "trellisd.toml"}, extra...)...)
			if code != 1 || stdout != "" || stderr != tc.check {
				t.Fatalf("config check: exit %d, stdout %q, stderr:\n%s\nwant exit 1, stderr:\n%s", code, stdout, stderr, tc.check)
			}
			want := tc.start
			if want == "" {
				want = "trellisd: " + tc.check
			}
			_, stderr, code = trellisd(t, dir, env, append([]string{"--config", "trellisd.toml"}, extra...)...)
			if code == 0 || stderr != want {
				t.Fatalf("trellisd --config: exit %d, stderr:\n%s\nwant:\n%s", code, stderr, want)
			}
		})
	}
}

// TestConfigCheckOK: a good file, and no file at all, are "ok".
func TestConfigCheckOK(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "trellisd.toml", "port = 7400\ngrpc-port = 7401\nallow-origin = [\"https://app.example.com\"]\ncommand-allow-ports = [5432]\n")
	env := []string{"TRELLIS_HOME=" + filepath.Join(dir, "home")}
	for _, args := range [][]string{{"config", "check", "--config", "trellisd.toml"}, {"config", "check"}, {"--config", "trellisd.toml", "config", "check"}} {
		stdout, stderr, code := trellisd(t, dir, env, args...)
		if code != 0 || stdout != "ok\n" || stderr != "" {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	_, stderr, code := trellisd(t, dir, env, "config", "verify")
	if code != 2 || stderr != "trellisd config: want check or print, e.g. trellisd config check --config trellisd.toml\n" {
		t.Fatalf("config verify: exit %d, stderr %q", code, stderr)
	}
}

// TestConfigPrintMasksPasswords: config print shows the passwords of the
// store DSN (user info and parameters) and of the search provider's URL
// as *****, and what it prints is a configuration file that prints the
// same.
func TestConfigPrintMasksPasswords(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "trellisd.toml", `store = "postgres://trellis:hunter2@db.example:5432/trellis?sslmode=require&sslpassword=opensesame"
search-provider = "searxng=https://me:swordfish@search.example/"
tool-env = ["GOPATH", "GOCACHE"]
commit-linger = "0s"
`)
	env := []string{"TRELLIS_HOME=" + filepath.Join(dir, "home")}
	stdout, stderr, code := trellisd(t, dir, env, "config", "print", "--config", "trellisd.toml")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	for _, secret := range []string{"hunter2", "opensesame", "swordfish"} {
		if strings.Contains(stdout, secret) {
			t.Errorf("config print shows the password %q:\n%s", secret, stdout)
		}
	}
	for _, want := range []string{
		`store = "postgres://trellis:*****@db.example:5432/trellis?sslmode=require&sslpassword=*****"`,
		`search-provider = "searxng=https://me:*****@search.example/"`,
		`tool-env = ["GOPATH", "GOCACHE"]`,
		`commit-linger = "0s"`,
	} {
		if !strings.Contains(stdout, want+"\n") {
			t.Errorf("config print lacks the line %s:\n%s", want, stdout)
		}
	}
	// What it prints, given back as the file, prints the same.
	writeFile(t, dir, "printed.toml", stdout)
	again, stderr, code := trellisd(t, dir, env, "config", "print", "--config", "printed.toml")
	if code != 0 || again != stdout {
		t.Fatalf("printing the printed file: exit %d, stderr %s, stdout:\n%s\nwant:\n%s", code, stderr, again, stdout)
	}
}
