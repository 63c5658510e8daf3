// Package daemon assembles a running trellisd from its parts: the home
// directory and its files (token, daemon.json, database, logs), the runtime's
// gRPC server, and the facade's HTTP listener, each built by a small function
// and run as one group that stops gracefully. cmd/trellisd and `trellis
// daemon` both run it. It is the only package that imports both runtime and
// facade.
package daemon
