// Package layering holds the test of the module's import rules: the Go
// client does not link the daemon, the facade no runtime package, the leaf
// packages only the standard library, and daemon/ builds its services in
// order instead of wiring them with setters after construction.
package layering
