// Package daemon assembles a running trellisd from its parts: the home
// directory and its files (token, daemon.json, database, logs), the runtime's
// gRPC server, and the facade's HTTP listener, each built by a small function
// and run as one group that stops gracefully. cmd/trellisd and `trellis
// daemon` both run it. It is the only package that imports both runtime and
// facade. daemon.json's format is package daemonfile (a leaf that clients
// read without linking the daemon). Its configuration comes from flags, the
// environment and a TOML file (--config; configfile.go, with the JSON
// Schema docs/trellisd.schema.json generated from FileConfig), checked as a
// whole (Validate, `config check`). The services are built in dependency
// order, each given what it needs at construction (a closure where two need
// each other); internal/layering checks these rules.
package daemon
