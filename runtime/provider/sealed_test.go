package provider_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/provider"
	"github.com/trellis-run/trellis/runtime/provider/providertest"
)

func (f *fixture) openShared(t *testing.T, key []byte) (*provider.Service, error) {
	t.Helper()
	return provider.New(context.Background(), provider.Options{Home: f.home, Settings: f.settings, Getenv: f.env.get,
		SharedKeys: true, SecretsKey: key})
}

func TestSealedKeysSharedThroughTheStore(t *testing.T) {
	const apiKey = "sk-sealed-SECRETSECRET"
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i * 7)
	}
	ctx := context.Background()
	srv := providertest.NewServer(t, providertest.NewOpenAIStream("m").Text("hi").Finish("stop").Usage(1, 1).Reply())
	a := newFixture(t, env{})
	sa, err := a.openShared(t, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := sa.Configure(ctx, "openai", provider.Update{APIKey: ptr(apiKey), BaseURL: ptr(srv.URL + "/v1")}); err != nil {
		t.Fatal(err)
	}
	// Sealed in the store; nothing under the home; the plaintext nowhere.
	dump := a.settings.dump()
	if strings.Contains(dump, "SECRETSECRET") || !strings.Contains(dump, "provider-keys/openai") || !strings.Contains(dump, "AES-256-GCM") {
		t.Fatalf("settings: %s", dump)
	}
	if _, err := os.Stat(filepath.Join(a.home, "secrets", "openai.json")); !os.IsNotExist(err) {
		t.Fatalf("a key file was written: %v", err)
	}

	// Another daemon (another home, the same store and secrets key) uses it.
	b := &fixture{home: t.TempDir(), settings: a.settings, env: env{}}
	sb, err := b.openShared(t, key)
	if err != nil {
		t.Fatal(err)
	}
	if !list(t, sb)["openai"].Configured {
		t.Fatal("openai not configured on the second daemon")
	}
	p, err := sb.Open("openai")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := llm.Collect(mustStream(t, p)); err != nil || res.Text != "hi" {
		t.Fatalf("stream %+v %v", res, err)
	}
	if got := srv.Requests()[0].Header.Get("Authorization"); got != "Bearer "+apiKey {
		t.Fatalf("Authorization %q", got)
	}

	// A removal through A reaches B at its next Reload.
	if err := sa.Configure(ctx, "openai", provider.Update{APIKey: ptr("")}); err != nil {
		t.Fatal(err)
	}
	if err := sb.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Enqueue(providertest.NewOpenAIStream("m").Text("hi").Finish("stop").Usage(1, 1).Reply())
	p, err = sb.Open("openai")
	if err != nil {
		t.Fatal(err)
	}
	llm.Collect(mustStream(t, p))
	if reqs := srv.Requests(); len(reqs) != 2 || reqs[1].Header.Get("Authorization") != "" {
		t.Fatalf("after the key was removed through A, B sent %d requests, the last with Authorization %q", len(reqs), reqs[len(reqs)-1].Header.Get("Authorization"))
	}
	if err := sa.Configure(ctx, "openai", provider.Update{APIKey: ptr(apiKey)}); err != nil {
		t.Fatal(err)
	}

	// A daemon with another secrets key, or none, is refused at start.
	other := make([]byte, 32)
	if _, err := b.openShared(t, other); errs.CodeOf(err) != errcode.Unsupported || !strings.Contains(err.Error(), "--secrets-key-file") ||
		strings.Contains(err.Error(), "SECRETSECRET") {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := b.openShared(t, nil); errs.CodeOf(err) != errcode.Unsupported || !strings.Contains(err.Error(), "--secrets-key-file") {
		t.Fatalf("no key: %v", err)
	}
	// Without a secrets key nothing is stored: unsupported, saying how.
	c := newFixture(t, env{})
	sc, err := c.openShared(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = sc.Configure(ctx, "openai", provider.Update{APIKey: ptr(apiKey)})
	if errs.CodeOf(err) != errcode.Unsupported || !strings.Contains(err.Error(), "--secrets-key-file") || strings.Contains(err.Error(), apiKey) {
		t.Fatalf("configure without a secrets key: %v", err)
	}
	if strings.Contains(c.settings.dump(), "SECRETSECRET") {
		t.Fatal("the key was stored")
	}
}

func TestParseSecretsKey(t *testing.T) {
	raw := make([]byte, 32)
	for i := range raw {
		raw[i] = byte(255 - i)
	}
	for _, text := range []string{base64.StdEncoding.EncodeToString(raw) + "\n", base64.RawURLEncoding.EncodeToString(raw), hex.EncodeToString(raw)} {
		got, err := provider.ParseSecretsKey(text)
		if err != nil || string(got) != string(raw) {
			t.Errorf("%q: %x %v", text, got, err)
		}
	}
	for _, text := range []string{"", "short", base64.StdEncoding.EncodeToString(raw[:16])} {
		if _, err := provider.ParseSecretsKey(text); err == nil || strings.Contains(err.Error(), text) && text != "" {
			t.Errorf("%q: %v", text, err)
		}
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	os.WriteFile(file, []byte(hex.EncodeToString(raw)), 0o600)
	if got, err := provider.LoadSecretsKey(file, func(string) string { return "" }); err != nil || string(got) != string(raw) {
		t.Errorf("file: %x %v", got, err)
	}
	if got, err := provider.LoadSecretsKey("", func(string) string { return base64.StdEncoding.EncodeToString(raw) }); err != nil || string(got) != string(raw) {
		t.Errorf("env: %x %v", got, err)
	}
	if got, err := provider.LoadSecretsKey("", func(string) string { return "" }); err != nil || got != nil {
		t.Errorf("none: %x %v", got, err)
	}
}
