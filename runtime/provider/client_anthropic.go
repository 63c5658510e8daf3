//go:build !trellis_lean && !trellis_no_anthropic

package provider

import (
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/llm/anthropic"
)

// This file compiles anthropic-sdk-go into the binary; the build tags
// trellis_lean and trellis_no_anthropic leave it out (see clients).
func init() {
	registerClient(anthropic.Vendor, func(c llm.EndpointConfig) client { return anthropic.New(c) })
}
