package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/provider"
	"github.com/trellis-run/trellis/runtime/provider/providertest"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TestPostgresScaleOutProviderKeys: an API key configured through daemon A
// is kept in the database, sealed with the secrets key every daemon is
// given, and is what daemon B sends to the provider after B restarts. No
// method, row or log shows it; a daemon without the secrets key, or with
// another one, is refused at start and says how to fix it.
func TestPostgresScaleOutProviderKeys(t *testing.T) {
	const apiKey = "sk-cluster-KEYKEYKEYKEY"
	srv := providertest.NewServer(t, providertest.NewOpenAIStream("local-model").Text("cluster answer").Finish("stop").Usage(5, 2).Reply())
	dsn := pgtest.FreshDatabase(t, pgtest.Server(t))
	secret := make([]byte, 32)
	for i := range secret {
		secret[i] = byte(3*i + 1)
	}
	keyFile := filepath.Join(t.TempDir(), "secrets.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(secret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startClusterProc(t, dsn, "--secrets-key-file", keyFile)
	homeB := t.TempDir()
	b := runClusterProc(t, homeB, dsn, "--secrets-key-file", keyFile)
	ctx := context.Background()

	ca := dialInfo(t, a.info)
	if err := ca.Call(ctx, "provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{
		"api_key": apiKey, "base_url": srv.URL + "/v1", "model": "local-model"}}, nil); err != nil {
		t.Fatalf("provider.configure via A: %v", err)
	}
	db := clusterDB(t, dsn)
	var sealed string
	if err := db.QueryRow(ctx, `SELECT value::text FROM settings WHERE namespace = 'provider-keys' AND key = 'openai'`).Scan(&sealed); err != nil {
		t.Fatalf("the sealed key row: %v", err)
	}
	var leaks int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM settings WHERE value::text LIKE '%KEYKEYKEY%'`).Scan(&leaks); err != nil || leaks != 0 ||
		!strings.Contains(sealed, "AES-256-GCM") {
		t.Fatalf("settings rows holding the key: %d (%v); sealed row %s", leaks, err, sealed)
	}
	if _, err := os.Stat(filepath.Join(a.home, "secrets", "openai.json")); !os.IsNotExist(err) {
		t.Fatalf("A wrote a key file in its home: %v", err)
	}

	// B restarts and uses the key on a turn of its own.
	b.kill()
	b = runClusterProc(t, homeB, dsn, "--secrets-key-file", keyFile)
	cb := dialInfo(t, b.info)
	var list struct {
		Providers []map[string]any `json:"providers"`
	}
	if err := cb.Call(ctx, "provider.list", map[string]any{}, &list); err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, p := range list.Providers {
		if p["vendor"] == "openai" {
			listed = p["configured"] == true && p["baseUrl"] == srv.URL+"/v1"
		}
	}
	if !listed {
		t.Fatalf("B lists %v", list.Providers)
	}
	id := createSession(t, cb, map[string]any{"provider": "openai"})
	evs := cb.Events(id)
	if err := cb.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hi"}, nil); err != nil {
		t.Fatal(err)
	}
	got := collect(t, evs, "turn.done", 1)
	if texts(got, "message.delta") != "cluster answer" {
		t.Fatalf("B's turn: %v", eventKinds(got))
	}
	reqs := srv.Requests()
	if len(reqs) != 1 || reqs[0].Header.Get("Authorization") != "Bearer "+apiKey {
		t.Fatalf("the provider got %d requests; Authorization %q", len(reqs), reqs[len(reqs)-1].Header.Get("Authorization"))
	}

	// A daemon without the secrets key, or with another one, is refused.
	t.Setenv(provider.SecretsKeyEnv, "")
	_, err := daemon.Start(ctx, daemon.Config{Home: t.TempDir(), Store: dsn})
	if err == nil || !strings.Contains(err.Error(), "--secrets-key-file") {
		t.Fatalf("a daemon without the secrets key: %v", err)
	}
	other := filepath.Join(t.TempDir(), "other.key")
	os.WriteFile(other, bytes.Repeat([]byte("ab"), 32), 0o600)
	_, err = daemon.Start(ctx, daemon.Config{Home: t.TempDir(), Store: dsn, SecretsKeyFile: other})
	if err == nil || !strings.Contains(err.Error(), "does not open") || strings.Contains(err.Error(), "KEYKEYKEY") {
		t.Fatalf("a daemon with another secrets key: %v", err)
	}

	for _, home := range []string{a.home, homeB} {
		logs, _ := os.ReadFile(daemon.LogPath(home))
		if len(logs) == 0 || bytes.Contains(logs, []byte("KEYKEYKEY")) {
			t.Errorf("log of %s (%d bytes) holds the key: %v", home, len(logs), bytes.Contains(logs, []byte("KEYKEYKEY")))
		}
	}
}
