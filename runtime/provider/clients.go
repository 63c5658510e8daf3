package provider

import (
	"fmt"
	"strings"

	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
)

// client is a real vendor's provider: it streams and it lists its models.
type client interface {
	llm.Provider
	llm.ModelLister
}

// clientFactory builds the client of one real vendor from the vendor's
// effective configuration and the service's shared HTTP client, retry
// policy and log.
type clientFactory func(llm.EndpointConfig) client

// clients holds the real vendors compiled into this binary. Each vendor's
// SDK is compiled only by its own file (client_openai.go,
// client_anthropic.go), which registers the vendor from init; a build tag
// leaves the file, and the SDK, out:
//
//	go build -tags trellis_lean ./cmd/trellis          # neither SDK: fake only
//	go build -tags trellis_no_anthropic ./cmd/trellis  # openai and fake
//	go build -tags trellis_no_openai ./cmd/trellis     # anthropic and fake
//
// A vendor left out is still listed (provider.list says so in its label),
// is never detected from the environment, and opening or configuring it
// fails with an unsupported error naming the tags.
var clients = map[string]clientFactory{}

// registerClient is called from init by the files that compile an SDK.
func registerClient(vendor string, f clientFactory) { clients[vendor] = f }

// compiledIn reports whether v can be used by this binary: the fake always,
// a real vendor when its SDK was compiled in.
func compiledIn(v vendor) bool {
	return !v.real || clients[v.name] != nil
}

// leftOutTags names the build tags that leave v's SDK out.
func leftOutTags(v vendor) string {
	return fmt.Sprintf("-tags trellis_lean or trellis_no_%s", v.name)
}

// CompiledIn lists the vendors this binary can open, in provider.list
// order.
func CompiledIn() []string {
	var out []string
	for _, v := range vendors {
		if compiledIn(v) {
			out = append(out, v.name)
		}
	}
	return out
}

// LeftOut lists the real vendors whose SDK a build tag left out of this
// binary (none in the default build).
func LeftOut() []string {
	var out []string
	for _, v := range vendors {
		if !compiledIn(v) {
			out = append(out, v.name)
		}
	}
	return out
}

// notInBuild is the error for a vendor whose SDK this binary lacks.
func notInBuild(v vendor) error {
	return errs.NewUnsupported("provider", v.name,
		"provider %s is not in this build of trellis: it was built with %s, which leaves the %s client out (this build has: %s); rebuild without the tag (go build ./cmd/trellis) to use it",
		v.name, leftOutTags(v), v.label, strings.Join(CompiledIn(), ", "))
}

// CheckBuild returns the unsupported error of a provider spec ("vendor" or
// "vendor:arg", as --provider takes it) that names a vendor left out of
// this binary, and nil for any other spec (a wrong one is reported where
// it is used).
func CheckBuild(spec string) error {
	name, _, _ := strings.Cut(spec, ":")
	if v, ok := lookupVendor(name); ok && !compiledIn(v) {
		return notInBuild(v)
	}
	return nil
}
