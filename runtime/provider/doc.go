// Package provider owns the configuration of the model providers: the known
// vendors (openai, anthropic, fake), what is configured for each (settings in
// the store, API keys in mode-0600 files under the home directory — or, on a
// store several daemons share, in the store sealed with AES-256-GCM under a
// secrets key they all have (sealed.go) — or the
// OPENAI_API_KEY / OPENAI_BASE_URL / ANTHROPIC_API_KEY environment), which
// one is the default, and the llm.Registry that opens them for sessions.
// No method, event or log line ever carries an API key.
package provider
