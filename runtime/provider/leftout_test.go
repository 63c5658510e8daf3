package provider_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/provider"
	"github.com/trellis-run/trellis/runtime/store"
)

// A vendor whose SDK a build tag left out is listed as such, never chosen
// from the environment, and refused with an unsupported error that names
// the tag when a caller asks for it. The same behaviour as a binary built
// with -tags trellis_lean (cmd/trellis's TestLeanBuild runs that one).

func TestLeanBuildLeavesBothVendorsOut(t *testing.T) {
	provider.LeaveOut(t, provider.OpenAI, provider.Anthropic)
	if got := provider.CompiledIn(); !reflect.DeepEqual(got, []string{"fake"}) {
		t.Errorf("CompiledIn = %v", got)
	}
	if got := provider.LeftOut(); !reflect.DeepEqual(got, []string{"openai", "anthropic"}) {
		t.Errorf("LeftOut = %v", got)
	}
	f := newFixture(t, env{"OPENAI_API_KEY": "sk-env-openai", "ANTHROPIC_API_KEY": "sk-ant-env"})
	s := f.open(t, "")
	if d := s.Default(); d != provider.Fake {
		t.Errorf("default with both keys in the environment = %q, want fake", d)
	}
	infos := list(t, s)
	for _, name := range []string{"openai", "anthropic"} {
		i := infos[name]
		if i.Configured || i.Default {
			t.Errorf("%s: configured %v default %v", name, i.Configured, i.Default)
		}
		if !strings.Contains(i.Label, "not in this build") || !strings.Contains(i.Label, "trellis_lean") {
			t.Errorf("%s label %q does not say it was left out", name, i.Label)
		}
	}
	if !infos["fake"].Default {
		t.Error("fake is not the default")
	}

	for _, name := range []string{"openai", "anthropic"} {
		_, err := s.Open(name)
		if errs.CodeOf(err) != errcode.Unsupported {
			t.Fatalf("Open(%s): %v (code %s)", name, err, errs.CodeOf(err))
		}
		for _, want := range []string{"provider " + name + " is not in this build", "trellis_lean", "trellis_no_" + name, "this build has: fake", "go build ./cmd/trellis"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Open(%s) = %q, missing %q", name, err, want)
			}
		}
		var e *errs.Error
		if !errors.As(err, &e) || e.Data["field"] != "provider" || e.Data["value"] != name {
			t.Errorf("Open(%s) data %v", name, e.Data)
		}
		if err := s.Configure(context.Background(), name, provider.Update{APIKey: ptr("sk-new")}); errs.CodeOf(err) != errcode.Unsupported {
			t.Errorf("Configure(%s): %v", name, err)
		}
	}
	if d := f.settings.dump(); d != "{}" {
		t.Errorf("a refused configure stored %s", d)
	}
	if entries, _ := os.ReadDir(filepath.Join(f.home, "secrets")); len(entries) != 0 {
		t.Errorf("a refused configure wrote secrets: %v", entries)
	}
	if p, err := s.Open(""); err != nil || p.Name() != provider.Fake {
		t.Errorf("Open(default) = %v, %v", p, err)
	}

	// --provider openai:MODEL on such a build: the daemon refuses to start.
	_, err := provider.New(context.Background(), provider.Options{Home: f.home, Settings: f.settings,
		Spec: "openai:gpt-4o", Getenv: f.env.get})
	if !errors.Is(err, provider.ErrInvalidSpec) || !strings.Contains(err.Error(), "not in this build") {
		t.Errorf("New with --provider openai:gpt-4o: %v", err)
	}
}

func TestOneVendorLeftOut(t *testing.T) {
	if len(provider.LeftOut()) > 0 {
		t.Skipf("this binary was built without %v", provider.LeftOut())
	}
	provider.LeaveOut(t, provider.Anthropic)
	f := newFixture(t, env{"OPENAI_API_KEY": "sk-env-openai", "ANTHROPIC_API_KEY": "sk-ant-env"})
	s := f.open(t, "")
	if d := s.Default(); d != provider.OpenAI {
		t.Errorf("default = %q, want openai", d)
	}
	if p, err := s.Open("openai"); err != nil || p.Name() != provider.OpenAI {
		t.Errorf("Open(openai) = %v, %v", p, err)
	}
	_, err := s.Open("anthropic")
	if errs.CodeOf(err) != errcode.Unsupported || !strings.Contains(err.Error(), "trellis_no_anthropic") ||
		!strings.Contains(err.Error(), "this build has: openai, fake") {
		t.Errorf("Open(anthropic) = %v", err)
	}
	// A default saved by a full build that named the vendor now left out
	// falls back to detection.
	if err := f.settings.PutSetting(context.Background(), store.Unfenced(), "providers", "default", []byte(`"anthropic"`)); err != nil {
		t.Fatal(err)
	}
	if d := f.open(t, "").Default(); d != provider.OpenAI {
		t.Errorf("default with a saved anthropic default = %q, want openai", d)
	}
}
