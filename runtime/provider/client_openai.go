//go:build !trellis_lean && !trellis_no_openai

package provider

import (
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/llm/openai"
)

// This file compiles openai-go into the binary; the build tags
// trellis_lean and trellis_no_openai leave it out (see clients).
func init() {
	registerClient(openai.Vendor, func(c llm.EndpointConfig) client { return openai.New(c) })
}
