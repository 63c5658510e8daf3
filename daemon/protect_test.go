package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/runtime/tool"
)

// TestGuardCoversTheDaemonsSecrets: the file tools refuse the secret files
// a daemon reads from outside its home, and the homes of the user's other
// daemons (registered when they start), from a workdir holding them all.
func TestGuardCoversTheDaemonsSecrets(t *testing.T) {
	user := t.TempDir()
	t.Setenv("HOME", user)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("PGPASSFILE", filepath.Join(user, "elsewhere", "pgpass"))
	files := map[string]string{
		".pgpass":                    "localhost:5432:*:postgres:pw-marker",
		".pg_service.conf":           "[db]\npassword=pw-marker",
		".postgresql/postgresql.key": "key-marker",
		"elsewhere/pgpass":           "pw-marker",
		"keys/secrets.key":           "key-marker",
		"keys/token":                 "token-marker",
		"other/home/token":           "token-marker",
		"project/ok.txt":             "fine",
	}
	for name, content := range files {
		p := filepath.Join(user, name)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := registerHome(filepath.Join(user, "other", "home")); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Home: filepath.Join(user, "mine"), TokenFile: filepath.Join(user, "keys", "token"),
		SecretsKeyFile: filepath.Join(user, "keys", "secrets.key"), Store: "postgres://u@h/db?sslkey=" + filepath.Join(user, "keys", "client.key")}
	if err := registerHome(cfg.Home); err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewBuiltinRegistry(tool.Options{Guard: guard(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) tool.Result {
		res, err := reg.Run(context.Background(), "read_file", tool.Call{ID: "r", Args: json.RawMessage(`{"path":"` + p + `"}`), Workdir: user})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for name := range files {
		res := read(name)
		if name == "project/ok.txt" {
			if !res.OK {
				t.Errorf("%s: %+v", name, res)
			}
			continue
		}
		if res.OK || strings.Contains(res.Output, "marker") || !strings.Contains(res.Error, "tools can never read or write it") {
			t.Errorf("%s: %+v", name, res)
		}
	}
	if res := read(".config/trellis/homes"); res.OK {
		t.Errorf("the registry of homes is readable: %+v", res)
	}
	if got := readHomes(homesRegistry()); len(got) != 2 {
		t.Errorf("registry: %v", got)
	}
	// A home that is gone leaves the registry at the next registration.
	os.RemoveAll(filepath.Join(user, "other"))
	registerHome(cfg.Home)
	if got := readHomes(homesRegistry()); len(got) != 1 || got[0] != cfg.Home {
		t.Errorf("registry after the other home went: %v", got)
	}
}

// TestControlPorts: the daemon's ports and every database host's port are
// refused to commands, minus those the operator allowed.
func TestControlPorts(t *testing.T) {
	cfg := Config{Store: "postgres://u@db1:6543,db2:7000/app"}
	if got := controlPorts(cfg, 8080, 9090, 0); !slices.Equal(got, []int{6543, 7000, 8080, 9090}) {
		t.Errorf("ports %v", got)
	}
	cfg.CommandAllowPorts = []int{7000, 8080}
	if got := controlPorts(cfg, 8080, 9090); !slices.Equal(got, []int{6543, 9090}) {
		t.Errorf("ports with 7000 and 8080 allowed: %v", got)
	}
	if got := controlPorts(Config{}, 8080); !slices.Equal(got, []int{8080}) {
		t.Errorf("SQLite ports: %v", got)
	}
	if _, err := ParseFlags("trellisd", []string{"--command-allow-ports", "5432,x"}); err == nil {
		t.Error("--command-allow-ports x accepted")
	}
}

// TestLinkedSecrets: a secret file with a hard link elsewhere is named.
func TestLinkedSecrets(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	dir := t.TempDir()
	cfg := Config{Home: filepath.Join(dir, "home"), SecretsKeyFile: filepath.Join(dir, "key")}
	os.MkdirAll(cfg.Home, 0o700)
	os.WriteFile(TokenPath(cfg.Home), []byte("t"), 0o600)
	os.WriteFile(cfg.SecretsKeyFile, []byte("k"), 0o600)
	if got := linkedSecrets(cfg); len(got) != 0 {
		t.Errorf("no links, got %v", got)
	}
	if err := os.Link(TokenPath(cfg.Home), filepath.Join(dir, "innocent.txt")); err != nil {
		t.Fatal(err)
	}
	if got := linkedSecrets(cfg); !slices.Equal(got, []string{TokenPath(cfg.Home)}) {
		t.Errorf("token linked, got %v", got)
	}
}
