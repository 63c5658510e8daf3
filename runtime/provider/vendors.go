package provider

import (
	"github.com/trellis-run/trellis/runtime/llm/fake"
)

// The vendors this package knows. The names of the real vendors are spelled
// out here rather than taken from their packages, which only the files that
// compile their SDKs import (client_openai.go, client_anthropic.go).
const (
	OpenAI    = "openai"
	Anthropic = "anthropic"
	Fake      = fake.Vendor
)

// AuthAPIKey is the one auth method of the real vendors.
const AuthAPIKey = "api_key"

// vendor describes one known vendor.
type vendor struct {
	name           string
	label          string
	keyEnv         string // environment variable holding an API key
	baseURLEnv     string // environment variable holding a base URL
	defaultBaseURL string
	// keyless vendors are configured by a base URL alone (a local
	// OpenAI-compatible server needs no key).
	keyless     bool
	real        bool // false for the offline fake
	authMethods []string
}

// vendors lists the known vendors in the order of provider.list, which is
// also the order of detection: with several configured, the first is the
// default.
var vendors = []vendor{
	{name: OpenAI, label: "OpenAI or any OpenAI-compatible server (vLLM, Ollama, llama.cpp, OpenRouter)",
		keyEnv: "OPENAI_API_KEY", baseURLEnv: "OPENAI_BASE_URL", defaultBaseURL: "https://api.openai.com/v1",
		keyless: true, real: true, authMethods: []string{AuthAPIKey}},
	{name: Anthropic, label: "Anthropic",
		keyEnv: "ANTHROPIC_API_KEY", baseURLEnv: "ANTHROPIC_BASE_URL", defaultBaseURL: "https://api.anthropic.com",
		real: true, authMethods: []string{AuthAPIKey}},
	{name: Fake, label: "Fake (scripted, offline)", authMethods: []string{}},
}

func lookupVendor(name string) (vendor, bool) {
	for _, v := range vendors {
		if v.name == name {
			return v, true
		}
	}
	return vendor{}, false
}

// VendorNames lists the vendors a provider spec may name (built into this
// binary or not), e.g. to check the vendors of a price file.
func VendorNames() []string { return vendorNames() }

func vendorNames() []string {
	out := make([]string, len(vendors))
	for i, v := range vendors {
		out[i] = v.name
	}
	return out
}

// EnvKey names the environment variable a daemon reads a vendor's API key
// from when it starts.
type EnvKey struct {
	Vendor string
	Env    string
}

// EnvKeys lists the environment variables of the real vendors' API keys, in
// the order of detection. A client compares them with provider.list to tell
// a person whose key the running daemon lacks.
func EnvKeys() []EnvKey {
	var out []EnvKey
	for _, v := range vendors {
		if v.keyEnv != "" {
			out = append(out, EnvKey{Vendor: v.name, Env: v.keyEnv})
		}
	}
	return out
}
