// Package provider owns the configuration of the model providers: the known
// vendors (openai, anthropic, fake), what is configured for each (settings in
// the store, API keys in mode-0600 files under the home directory — or, on a
// store several daemons share, in the store sealed with AES-256-GCM under a
// secrets key they all have (sealed.go) — or the
// OPENAI_API_KEY / OPENAI_BASE_URL / ANTHROPIC_API_KEY environment), which
// one is the default, and the llm.Registry that opens them for sessions.
// No method, event or log line ever carries an API key.
//
// The real vendors' clients (runtime/llm/openai on openai-go,
// runtime/llm/anthropic on anthropic-sdk-go) are compiled in by
// client_openai.go and client_anthropic.go, which register them from init.
// The build tag trellis_lean leaves both out (the binary then runs the fake
// provider only), trellis_no_openai or trellis_no_anthropic one of them;
// such a vendor stays listed, and asking for it is an unsupported error
// that names the tag (see clients).
package provider
