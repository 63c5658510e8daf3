package llm_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
)

func TestParseSpec(t *testing.T) {
	tests := []struct {
		in      string
		want    llm.Spec
		wantErr bool
	}{
		{in: "fake", want: llm.Spec{Vendor: "fake"}},
		{in: "fake:/tmp/script.json", want: llm.Spec{Vendor: "fake", Arg: "/tmp/script.json"}},
		{in: `fake:C:\scripts\a.json`, want: llm.Spec{Vendor: "fake", Arg: `C:\scripts\a.json`}},
		{in: "openai:gpt-4o-mini", want: llm.Spec{Vendor: "openai", Arg: "gpt-4o-mini"}},
		{in: "my-vendor_2:x:y", want: llm.Spec{Vendor: "my-vendor_2", Arg: "x:y"}},
		{in: "", wantErr: true},
		{in: ":script.json", wantErr: true},
		{in: "fake:", wantErr: true},
		{in: "Fake", wantErr: true},
		{in: "2fake", wantErr: true},
		{in: "fa ke", wantErr: true},
		{in: "-fake", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := llm.ParseSpec(tt.in)
			if tt.wantErr {
				if !errors.Is(err, llm.ErrInvalidSpec) || errs.CodeOf(err) != errcode.InvalidParams {
					t.Fatalf("ParseSpec(%q) error = %v (code %q), want ErrInvalidSpec with invalid_params", tt.in, err, errs.CodeOf(err))
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSpec(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
			if got.String() != tt.in {
				t.Errorf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
}

func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"fake", "fake:x.json", "", ":", "openai:gpt", "a:b:c", "Ä:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := llm.ParseSpec(in)
		if err != nil {
			return
		}
		again, err := llm.ParseSpec(s.String())
		if err != nil || again != s {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", in, again, err, s)
		}
	})
}

type namedProvider struct{ name, arg string }

func (p namedProvider) Name() string { return p.name }
func (p namedProvider) Stream(context.Context, llm.Request) (llm.Stream, error) {
	return nil, errors.New("not streaming")
}

func TestRegistry(t *testing.T) {
	r := llm.NewRegistry()
	r.Register("zeta", func(arg string) (llm.Provider, error) { return namedProvider{"zeta", arg}, nil })
	r.Register("alpha", func(arg string) (llm.Provider, error) { return namedProvider{"alpha", arg}, nil })

	if got, want := r.Vendors(), []string{"alpha", "zeta"}; !slices.Equal(got, want) {
		t.Errorf("Vendors() = %v, want %v", got, want)
	}
	p, err := r.Open("zeta:some/arg")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.(namedProvider); got != (namedProvider{"zeta", "some/arg"}) {
		t.Errorf("Open built %+v", got)
	}

	_, err = r.Open("nope:x")
	if !errors.Is(err, llm.ErrUnknownVendor) || errs.CodeOf(err) != errcode.InvalidParams {
		t.Errorf("Open(unknown) error = %v, want ErrUnknownVendor / invalid_params", err)
	}
	if _, err := r.Open("Bad Spec"); !errors.Is(err, llm.ErrInvalidSpec) {
		t.Errorf("Open(bad spec) error = %v, want ErrInvalidSpec", err)
	}
}

func TestRegistryPanicsOnDuplicate(t *testing.T) {
	r := llm.NewRegistry()
	f := func(string) (llm.Provider, error) { return nil, nil }
	r.Register("fake", f)
	defer func() {
		if recover() == nil {
			t.Fatal("second Register did not panic")
		}
	}()
	r.Register("fake", f)
}
