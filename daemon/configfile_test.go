package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/internal/testbin"
)

var update = flag.Bool("update", false, "rewrite docs/trellisd.schema.json from FileConfig")

// TestFileKeysAreFlags: the configuration file has a key for every flag
// (but --version and --config), named like it, and no other.
func TestFileKeysAreFlags(t *testing.T) {
	var flags []string
	newCommandLine("trellisd").fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "version" && f.Name != "config" {
			flags = append(flags, f.Name)
		}
	})
	keys := slices.Sorted(maps.Keys(fileKeys))
	if !slices.Equal(flags, keys) {
		t.Fatalf("flags %v\nfile keys %v", flags, keys)
	}
}

// TestConfigSchema fails when docs/trellisd.schema.json is not the schema
// generated from FileConfig; -update rewrites it.
func TestConfigSchema(t *testing.T) {
	const path = "../docs/trellisd.schema.json"
	got, err := ConfigSchema()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./daemon -run TestConfigSchema -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not the schema of FileConfig: go test ./daemon -run TestConfigSchema -update rewrites it", path)
	}
}

// TestDocumentedExample: the example file of docs/operations.md sets every
// key, and loads without a problem.
func TestDocumentedExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## Configuration file\n.*?```toml\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/operations.md has no ```toml example under ## Configuration file")
	}
	path := filepath.Join(t.TempDir(), "trellisd.toml")
	if err := os.WriteFile(path, m[1], 0o600); err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if _, err := toml.Decode(string(m[1]), &keys); err != nil {
		t.Fatal(err)
	}
	for k := range fileKeys {
		if _, ok := keys[k]; !ok {
			t.Errorf("the example lacks %s", k)
		}
	}
	if _, _, problems, err := load("trellisd", []string{"--config", path}, func(string) string { return "" }); err != nil || problems != nil {
		t.Fatalf("err %v, problems %v", err, problems)
	}
	// The schema takes it, and refuses what the loader refuses.
	schema := compileSchema(t)
	for _, tc := range []struct {
		name string
		mut  func(map[string]any)
		ok   bool
	}{
		{"the example", func(map[string]any) {}, true},
		{"an unknown key", func(m map[string]any) { m["colour"] = "blue" }, false},
		{"a port as a string", func(m map[string]any) { m["port"] = "8080" }, false},
		{"a port out of range", func(m map[string]any) { m["port"] = 70000 }, false},
		{"a bad duration", func(m map[string]any) { m["lease"] = "10 seconds" }, false},
		{"a bad log level", func(m map[string]any) { m["log-level"] = "loud" }, false},
	} {
		m := maps.Clone(keys)
		tc.mut(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := schema.Validate(v); (err == nil) != tc.ok {
			t.Errorf("%s: schema says %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// compileSchema compiles ConfigSchema.
func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	b, err := ConfigSchema()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	const url = "trellisd.schema.json"
	c := jsonschema.NewCompiler()
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStartFromFile: a daemon started with --config FILE serves on the
// port and from the home the file names.
func TestStartFromFile(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	port := testbin.FreePort(t, 0)
	file := filepath.Join(dir, "trellisd.toml")
	content := fmt.Sprintf("home = %q\nport = %d\nlog-level = \"warn\"\nprovider = \"fake\"\n", home, port)
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TRELLIS_HOME", "")
	t.Setenv("TRELLIS_PROVIDER", "")
	t.Setenv("TRELLIS_STORE", "")
	cfg, err := ParseFlags("trellisd", []string{"--config", file})
	if err != nil {
		t.Fatal(err)
	}
	d, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	info, err := daemonfile.Read(home)
	if err != nil {
		t.Fatal(err)
	}
	if info.Port != port || d.HTTPPort() != port || info.Provider != "fake" {
		t.Fatalf("daemon.json in %s: port %d, provider %q; want port %d, provider fake", home, info.Port, info.Provider, port)
	}
	if !strings.EqualFold(d.cfg.LogLevel, "warn") {
		t.Fatalf("log level %q, want warn", d.cfg.LogLevel)
	}
}

// TestEveryKeyRoundTrips: each key, set in a file to a value other than
// its default, is what config print shows (fileConfigOf misses no field).
func TestEveryKeyRoundTrips(t *testing.T) {
	const file = `
home = "/srv/trellis"
host = "0.0.0.0"
tls-cert = "/etc/trellis/cert.pem"
tls-key = "/etc/trellis/key.pem"
cluster-ca = "/etc/trellis/ca.pem"
cluster-cert = "/etc/trellis/node.pem"
cluster-key = "/etc/trellis/node-key.pem"
insecure-no-tls = true
port = 7400
grpc-port = 7401
gateway-port = 7402
provider = "fake:/srv/script.json"
provider-concurrency = 5
provider-rpm = 500
budget-default-cost-micro-usd = 5000000
budget-default-tokens = 2000000
store = "postgres://trellis@db.example:5432/trellis"
allow-origin = ["https://a.example", "https://b.example"]
log-level = "debug"
approval-timeout = "2m0s"
commit-linger = "5ms"
merge-deltas = 4096
durability = "batch"
max-connections = 100
max-watched-sessions = 50
max-in-flight = 10
hello-timeout = "5s"
operation-window = "1h0m0s"
max-unauthenticated = 16
mcp-config = "/etc/trellis/mcp.json"
prices = "/etc/trellis/prices.toml"
search-provider = "searxng=http://127.0.0.1:8888"
web-fetch-allow-private = true
browser-provider = "none"
browser-chromium = "/usr/lib/chromium/chromium"
log-stderr = true
log-max-size = 10
log-max-files = 2
unsandboxed-commands = true
tool-env = ["GOPATH", "GOCACHE"]
command-allow-ports = [5432, 6379]
output-max-age = "24h0m0s"
output-max-size = 64
command-network = "host"
lease = "20s"
token-file = "/etc/trellis/token"
secrets-key-file = "/etc/trellis/secrets.key"
advertise = "10.0.0.5:7401"
workdir = "/srv/work"
workspace-root = "/srv/managed"
checkpoints = true
checkpoint-max-file = 1048576
checkpoint-quota = 256
retain = "720h"
retain-latest = 20
retain-per = "agent"
`
	var want FileConfig
	if _, err := toml.Decode(file, &want); err != nil {
		t.Fatal(err)
	}
	v := reflect.ValueOf(want)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("the test's file does not set %s", v.Type().Field(i).Tag.Get("toml"))
		}
	}
	path := filepath.Join(t.TempDir(), "trellisd.toml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, problems, err := load("trellisd", []string{"--config", path}, func(string) string { return "" })
	if err != nil || problems != nil {
		t.Fatalf("err %v, problems %v", err, problems)
	}
	if got := fileConfigOf(cfg.WithDefaults()); !reflect.DeepEqual(got, want) {
		t.Fatalf("printed\n%+v\nwant\n%+v", got, want)
	}
}

// TestRetentionFlags: --retain, --retain-latest and --retain-per reach the
// configuration (an age in Go's units, or in days or weeks, on the command
// line and in the file); bad values are reported, each under its key.
func TestRetentionFlags(t *testing.T) {
	for _, retain := range []string{"720h", "30d"} {
		cfg, err := ParseFlags("trellisd", []string{"--retain", retain, "--retain-latest", "5", "--retain-per", "agent"})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Retain != 720*time.Hour || cfg.RetainLatest != 5 || cfg.RetainPer != "agent" {
			t.Fatalf("--retain %s: parsed retain %v, retain-latest %d, retain-per %q", retain, cfg.Retain, cfg.RetainLatest, cfg.RetainPer)
		}
	}
	path := filepath.Join(t.TempDir(), "trellisd.toml")
	if err := os.WriteFile(path, []byte("retain = \"2w\"\noutput-max-age = \"1d12h\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, problems, err := load("trellisd", []string{"--config", path}, func(string) string { return "" })
	if err != nil || problems != nil || cfg.Retain != 14*24*time.Hour || cfg.OutputMaxAge != 36*time.Hour {
		t.Fatalf("file: retain %v, output-max-age %v, problems %v, err %v", cfg.Retain, cfg.OutputMaxAge, problems, err)
	}
	if _, err := ParseFlags("trellisd", []string{"--retain", "30 days"}); err == nil || !strings.Contains(err.Error(), "30d") {
		t.Errorf("--retain \"30 days\": %v, want an error with an example", err)
	}
	if c := (Config{}).WithDefaults(); c.Retain != 0 || c.RetainLatest != 0 || c.RetainPer != "workdir" || c.RetentionEvery != time.Hour {
		t.Fatalf("defaults: retain %v, retain-latest %d, retain-per %q, every %v", c.Retain, c.RetainLatest, c.RetainPer, c.RetentionEvery)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Retain: -time.Hour}, "retain -1h0m0s"},
		{Config{RetainLatest: -1}, "retain-latest -1"},
		{Config{RetainPer: "owner"}, `retain-per "owner"`},
	} {
		err := tc.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
