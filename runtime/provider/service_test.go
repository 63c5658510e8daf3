package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/provider"
	"github.com/trellis-run/trellis/runtime/provider/providertest"
	"github.com/trellis-run/trellis/runtime/store"
)

// settings is an in-memory store.SettingStore.
type settings struct {
	mu sync.Mutex
	m  map[string]json.RawMessage
}

func newSettings() *settings { return &settings{m: map[string]json.RawMessage{}} }

func (s *settings) PutSetting(_ context.Context, _ store.Writer, ns, key string, v json.RawMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[ns+"/"+key] = append(json.RawMessage(nil), v...)
	return nil
}

func (s *settings) GetSetting(_ context.Context, ns, key string) (json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[ns+"/"+key]
	if !ok {
		return nil, store.ErrNotFound
	}
	return v, nil
}

func (s *settings) ListSettings(_ context.Context, ns string) ([]store.Setting, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Setting
	for k, v := range s.m {
		if n, key, _ := strings.Cut(k, "/"); n == ns {
			out = append(out, store.Setting{Namespace: ns, Key: key, Value: v})
		}
	}
	return out, nil
}

func (s *settings) DeleteSetting(_ context.Context, _ store.Writer, ns, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[ns+"/"+key]; !ok {
		return store.ErrNotFound
	}
	delete(s.m, ns+"/"+key)
	return nil
}

func (s *settings) dump() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, _ := json.Marshal(s.m)
	return string(b)
}

type env map[string]string

func (e env) get(k string) string { return e[k] }

type fixture struct {
	home     string
	settings *settings
	env      env
}

func newFixture(t *testing.T, e env) *fixture {
	return &fixture{home: t.TempDir(), settings: newSettings(), env: e}
}

func (f *fixture) open(t *testing.T, spec string) *provider.Service {
	t.Helper()
	s, err := provider.New(context.Background(), provider.Options{Home: f.home, Settings: f.settings, Spec: spec, Getenv: f.env.get})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func list(t *testing.T, s *provider.Service) map[string]provider.Info {
	t.Helper()
	infos, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]provider.Info{}
	for _, i := range infos {
		out[i.Vendor] = i
	}
	if names := []string{infos[0].Vendor, infos[1].Vendor, infos[2].Vendor}; !reflect.DeepEqual(names, []string{"openai", "anthropic", "fake"}) {
		t.Errorf("vendors %v", names)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func TestDetection(t *testing.T) {
	tests := []struct {
		name       string
		env        env
		spec       string
		def        string
		configured []string
	}{
		{"nothing set", env{}, "", "fake", []string{"fake"}},
		{"OPENAI_API_KEY", env{"OPENAI_API_KEY": "sk-a"}, "", "openai", []string{"openai", "fake"}},
		{"OPENAI_BASE_URL alone (local server)", env{"OPENAI_BASE_URL": "http://localhost:11434/v1"}, "", "openai", []string{"openai", "fake"}},
		{"ANTHROPIC_API_KEY", env{"ANTHROPIC_API_KEY": "sk-ant-a"}, "", "anthropic", []string{"anthropic", "fake"}},
		{"both keys: openai first", env{"OPENAI_API_KEY": "sk-a", "ANTHROPIC_API_KEY": "sk-ant-a"}, "", "openai", []string{"openai", "anthropic", "fake"}},
		{"ANTHROPIC_BASE_URL alone", env{"ANTHROPIC_BASE_URL": "http://localhost:1"}, "", "fake", []string{"fake"}},
		{"blank key", env{"OPENAI_API_KEY": "  "}, "", "fake", []string{"fake"}},
		{"bad OPENAI_BASE_URL ignored", env{"OPENAI_BASE_URL": "localhost:11434"}, "", "fake", []string{"fake"}},
		{"--provider wins", env{"OPENAI_API_KEY": "sk-a"}, "fake", "fake", []string{"openai", "fake"}},
		{"--provider anthropic:model", env{"ANTHROPIC_API_KEY": "sk-ant-a"}, "anthropic:claude-opus-4-1", "anthropic", []string{"anthropic", "fake"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newFixture(t, tc.env).open(t, tc.spec)
			if got := s.Default(); got != tc.def {
				t.Errorf("Default = %q, want %q", got, tc.def)
			}
			var configured []string
			for _, name := range []string{"openai", "anthropic", "fake"} {
				info := list(t, s)[name]
				if info.Configured {
					configured = append(configured, name)
				}
				if info.Default != (name == tc.def) {
					t.Errorf("%s: default %v", name, info.Default)
				}
			}
			if !reflect.DeepEqual(configured, tc.configured) {
				t.Errorf("configured %v, want %v", configured, tc.configured)
			}
			p, err := s.Open("")
			if err != nil || p.Name() != tc.def {
				t.Fatalf("Open(\"\") = %v, %v", p, err)
			}
			if tc.spec == "anthropic:claude-opus-4-1" {
				if m := p.(llm.ModelLister).DefaultModel(); m != "claude-opus-4-1" || list(t, s)["anthropic"].DefaultModel != m {
					t.Errorf("spec model not used: %q", m)
				}
			}
		})
	}
}

func TestBadSpec(t *testing.T) {
	for spec, want := range map[string]error{"nope": provider.ErrInvalidSpec, "openai:": provider.ErrInvalidSpec,
		"openai": provider.ErrNotConfigured, "fake:/does/not/exist.json": provider.ErrInvalidSpec} {
		f := newFixture(t, env{})
		_, err := provider.New(context.Background(), provider.Options{Home: f.home, Settings: f.settings, Spec: spec, Getenv: f.env.get})
		if !errors.Is(err, want) {
			t.Errorf("spec %q: %v, want %v", spec, err, want)
		}
	}
}

func TestConfigureRejects(t *testing.T) {
	s := newFixture(t, env{}).open(t, "")
	tests := []struct {
		name   string
		vendor string
		u      provider.Update
		err    error
		code   string
		msg    []string
	}{
		{"unknown vendor", "gemini", provider.Update{APIKey: ptr("k")}, provider.ErrUnknownVendor, errcode.NotFound, []string{"gemini", "openai, anthropic, fake"}},
		{"empty", "openai", provider.Update{}, provider.ErrEmptyConfig, errcode.InvalidParams, []string{"config is empty"}},
		{"every problem at once", "openai", provider.Update{APIKey: ptr("sk a"), BaseURL: ptr("ftp://x"), Model: ptr("two words")},
			provider.ErrInvalidConfig, errcode.InvalidParams, []string{"api_key must not contain spaces", "http:// or https://", `model "two words"`}},
		{"base_url without host", "openai", provider.Update{BaseURL: ptr("http://")}, provider.ErrInvalidConfig, errcode.InvalidParams, []string{"host is missing"}},
		{"base_url with credentials", "anthropic", provider.Update{BaseURL: ptr("https://u:secret@example.com")}, provider.ErrInvalidConfig, errcode.InvalidParams, []string{"credentials"}},
		{"base_url with query", "openai", provider.Update{BaseURL: ptr("https://example.com/v1?key=x")}, provider.ErrInvalidConfig, errcode.InvalidParams, []string{"query"}},
		{"fake takes no key", "fake", provider.Update{APIKey: ptr("k")}, provider.ErrInvalidConfig, errcode.InvalidParams, []string{"api_key is not accepted"}},
		{"default before configured", "anthropic", provider.Update{Default: ptr(true)}, provider.ErrNotConfigured, errcode.InvalidParams, []string{"give an api_key"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Configure(context.Background(), tc.vendor, tc.u)
			if !errors.Is(err, tc.err) || errs.CodeOf(err) != tc.code {
				t.Fatalf("err %v (code %s), want %v (%s)", err, errs.CodeOf(err), tc.err, tc.code)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message %q lacks %q", err.Error(), m)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("message shows a credential: %q", err.Error())
			}
		})
	}
	if s.Default() != "fake" {
		t.Errorf("a rejected configure changed the default to %s", s.Default())
	}
}

func TestConfigurePersistsAndNeverShowsTheKey(t *testing.T) {
	const key = "sk-ant-api03-SECRETSECRET"
	srv := providertest.NewServer(t, providertest.NewAnthropicStream("claude-haiku-4-5", 3).Text("hi").Reply("end_turn", 1))
	f := newFixture(t, env{})
	s := f.open(t, "")
	before, _ := s.Open("fake")
	err := s.Configure(context.Background(), "anthropic", provider.Update{
		APIKey: ptr(" " + key + " "), BaseURL: ptr(srv.URL + "/"), Model: ptr("claude-haiku-4-5"),
		Models: []string{"claude-haiku-4-5", " ", "claude-opus-4-1"}, Default: ptr(true)})
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, s *provider.Service) {
		t.Helper()
		if s.Default() != "anthropic" {
			t.Errorf("Default = %s", s.Default())
		}
		infos, _ := s.List(context.Background())
		got := list(t, s)["anthropic"]
		want := provider.Info{Vendor: "anthropic", Label: "Anthropic", DefaultModel: "claude-haiku-4-5",
			Models: []string{"claude-haiku-4-5", "claude-opus-4-1"}, Configured: true, Default: true,
			BaseURL: srv.URL, AuthMethods: []string{"api_key"}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("anthropic =\n%+v\nwant\n%+v", got, want)
		}
		if b, _ := json.Marshal(infos); strings.Contains(string(b), "SECRET") {
			t.Errorf("List shows the key: %s", b)
		}
	}
	check(t, s)
	if strings.Contains(f.settings.dump(), "SECRET") {
		t.Errorf("the key went into the settings table: %s", f.settings.dump())
	}
	dir := filepath.Join(f.home, "secrets")
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("secrets dir: %v %v", fi.Mode(), err)
	}
	fi, err := os.Stat(filepath.Join(dir, "anthropic.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v %v", fi, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("secrets dir holds %d files (temporary files left?)", len(entries))
	}

	// The configuration is in force for the next Open, and survives a restart.
	p, err := s.Open("anthropic")
	if err != nil {
		t.Fatal(err)
	}
	if p.(llm.ModelLister).DefaultModel() != "claude-haiku-4-5" {
		t.Errorf("model %s", p.(llm.ModelLister).DefaultModel())
	}
	res, err := llm.Collect(mustStream(t, p))
	if err != nil || res.Text != "hi" {
		t.Fatalf("stream %+v %v", res, err)
	}
	if auth := srv.Requests()[0].Header.Get("Authorization"); auth != "Bearer "+key {
		t.Errorf("the trimmed key was not sent: %q", auth)
	}
	if again, _ := s.Open("fake"); again != before {
		t.Error("configuring anthropic rebuilt the fake provider")
	}
	check(t, f.open(t, ""))

	// An empty key removes it; the vendor is then unconfigured and no
	// longer the default.
	if err := s.Configure(context.Background(), "anthropic", provider.Update{APIKey: ptr("")}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "anthropic.json")); !os.IsNotExist(err) {
		t.Errorf("the key file is still there: %v", err)
	}
	if _, err := s.Open("anthropic"); !errors.Is(err, provider.ErrNotConfigured) {
		t.Errorf("Open after removing the key: %v", err)
	}
	if s.Default() != "fake" {
		t.Errorf("Default = %s", s.Default())
	}
}

func mustStream(t *testing.T, p llm.Provider) llm.Stream {
	t.Helper()
	s, err := p.Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConfiguredKeyBeatsTheEnvironment(t *testing.T) {
	srv := providertest.NewServer(t, providertest.NewOpenAIStream("m").Text("ok").Finish("stop").Reply(),
		providertest.NewOpenAIStream("m").Text("ok").Finish("stop").Reply())
	s := newFixture(t, env{"OPENAI_API_KEY": "sk-from-env", "OPENAI_BASE_URL": srv.URL + "/v1"}).open(t, "")
	p, _ := s.Open("openai")
	llm.Collect(mustStream(t, p))
	if err := s.Configure(context.Background(), "openai", provider.Update{APIKey: ptr("sk-configured")}); err != nil {
		t.Fatal(err)
	}
	p2, _ := s.Open("openai")
	if p2 == p {
		t.Error("the provider was not rebuilt after configure")
	}
	llm.Collect(mustStream(t, p2))
	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[0].Header.Get("Authorization") != "Bearer sk-from-env" || reqs[1].Header.Get("Authorization") != "Bearer sk-configured" {
		t.Errorf("auth headers %q, %q", reqs[0].Header.Get("Authorization"), reqs[len(reqs)-1].Header.Get("Authorization"))
	}
}

func TestDefaultFalseReturnsToDetection(t *testing.T) {
	f := newFixture(t, env{"ANTHROPIC_API_KEY": "sk-ant-x"})
	s := f.open(t, "")
	ctx := context.Background()
	if err := s.Configure(ctx, "fake", provider.Update{Default: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	if s.Default() != "fake" || f.open(t, "").Default() != "fake" {
		t.Fatalf("default fake not kept")
	}
	if err := s.Configure(ctx, "fake", provider.Update{Default: ptr(false)}); err != nil {
		t.Fatal(err)
	}
	if s.Default() != "anthropic" || f.open(t, "").Default() != "anthropic" {
		t.Errorf("Default = %s after default:false", s.Default())
	}
	// default:false on a vendor that is not the default changes nothing.
	if err := s.Configure(ctx, "openai", provider.Update{Default: ptr(false)}); err != nil || s.Default() != "anthropic" {
		t.Errorf("Default = %s, %v", s.Default(), err)
	}
}

func TestOpen(t *testing.T) {
	s := newFixture(t, env{}).open(t, "")
	if _, err := s.Open("gemini"); !errors.Is(err, provider.ErrUnknownVendor) || errs.CodeOf(err) != errcode.NotFound {
		t.Errorf("unknown: %v", err)
	}
	if _, err := s.Open("fake:/etc/passwd"); !errors.Is(err, provider.ErrUnknownVendor) {
		t.Errorf("a spec through Open: %v", err)
	}
	_, err := s.Open("openai")
	if !errors.Is(err, provider.ErrNotConfigured) || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Errorf("unconfigured: %v", err)
	}
	a, _ := s.Open("fake")
	b, _ := s.Open("")
	if a == nil || a != b {
		t.Error("the fake provider is not reused")
	}
}

func TestLoginWeb(t *testing.T) {
	s := newFixture(t, env{}).open(t, "")
	for _, v := range []string{"openai", "anthropic", "fake"} {
		_, err := s.LoginWeb(context.Background(), v, "browser")
		if !errors.Is(err, provider.ErrLoginUnsupported) || errs.CodeOf(err) != errcode.LoginUnsupported {
			t.Errorf("%s: %v", v, err)
		}
	}
	if _, err := s.LoginWeb(context.Background(), "x", ""); errs.CodeOf(err) != errcode.NotFound {
		t.Errorf("unknown vendor: %v", err)
	}
}

func TestLooseSecretFileIsTightened(t *testing.T) {
	f := newFixture(t, env{})
	dir := filepath.Join(f.home, "secrets")
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "openai.json"), []byte(`{"api_key":"sk-loose"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s := f.open(t, "")
	if fi, _ := os.Stat(filepath.Join(dir, "openai.json")); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	if s.Default() != "openai" {
		t.Errorf("the stored key was not loaded")
	}
	os.WriteFile(filepath.Join(dir, "anthropic.json"), []byte(`sk-not-json`), 0o600)
	_, err := provider.New(context.Background(), provider.Options{Home: f.home, Settings: f.settings, Getenv: f.env.get})
	if err == nil || strings.Contains(err.Error(), "sk-not-json") {
		t.Errorf("unreadable key file: %v", err)
	}
}

func TestEnvironmentKeyStaysWithItsEndpoint(t *testing.T) {
	srv := providertest.NewServer(t, providertest.NewOpenAIStream("m").Text("ok").Finish("stop").Reply())
	s := newFixture(t, env{"OPENAI_API_KEY": "sk-real-openai-key"}).open(t, "")
	if err := s.Configure(context.Background(), "openai", provider.Update{BaseURL: ptr(srv.URL + "/v1")}); err != nil {
		t.Fatal(err)
	}
	p, err := s.Open("openai")
	if err != nil {
		t.Fatal(err)
	}
	llm.Collect(mustStream(t, p))
	if auth := srv.Requests()[0].Header.Get("Authorization"); auth != "" {
		t.Errorf("the environment's OpenAI key went to a configured server: %q", auth)
	}
}

func TestConfiguredContextWindow(t *testing.T) {
	f := newFixture(t, env{})
	s := f.open(t, "")
	ctx := context.Background()
	key, window := "sk-test", 4321
	if err := s.Configure(ctx, "openai", provider.Update{APIKey: &key, ContextWindow: &window}); err != nil {
		t.Fatal(err)
	}
	p, err := s.Open("openai")
	if err != nil {
		t.Fatal(err)
	}
	cw, ok := p.(llm.ContextWindower)
	if !ok || cw.ContextWindow("some-unknown-model") != window {
		t.Fatalf("context window of a configured provider: %v", p)
	}
	// It survives a restart (stored in the settings table).
	p2, err := f.open(t, "").Open("openai")
	if err != nil {
		t.Fatal(err)
	}
	if got := p2.(llm.ContextWindower).ContextWindow("some-unknown-model"); got != window {
		t.Fatalf("after a restart: %d", got)
	}
	bad := -5
	if err := s.Configure(ctx, "openai", provider.Update{ContextWindow: &bad}); errs.CodeOf(err) != errcode.InvalidParams {
		t.Fatalf("negative window: %v", err)
	}
}
