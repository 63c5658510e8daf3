// Package ids makes the protocol's prefixed random identifiers (s-…, t-…, ap-…).
package ids

import (
	"crypto/rand"
	"encoding/hex"
)

// New returns prefix + "-" + 16 random hex characters, e.g. "s-3f9a0c1b2d4e5f60".
func New(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
	return prefix + "-" + hex.EncodeToString(b[:])
}
