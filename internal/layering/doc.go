// Package layering holds the test of the module's import rules: the Go
// client does not link the daemon; the facade links no runtime package and
// neither the runtime nor the client links the facade; protocol/ (the wire
// below them all) links only proto/; the runtime's domain packages link no
// gRPC (only runtime/rpc does); the leaf packages link only the
// standard library; and daemon/ builds its services in order instead of
// wiring them with setters after construction: no func literal (or hook
// holding the services) made while the runtime is built reads a service
// assigned after it, but for the few real cycles it lists.
package layering
