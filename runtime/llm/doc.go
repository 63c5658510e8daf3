// Package llm defines how Trellis talks to a model provider: the model-facing
// conversation (Message), one streamed model call (Provider, Request, Stream,
// Chunk), the optional capabilities a provider may add, and the Registry that
// turns a provider spec such as "fake:/path/script.json" into a Provider.
//
// Vendors live in subpackages (fake/ now; openai/ and anthropic/ later) and
// register a Factory under their vendor name, so callers never import them
// directly to pick one.
package llm
