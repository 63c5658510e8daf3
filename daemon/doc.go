// Package daemon assembles a running trellisd from its parts: the home
// directory and its files (token, daemon.json, database, logs), the runtime's
// gRPC server, and the facade's HTTP listener, each built by a small function
// and run as one group that stops gracefully. cmd/trellisd and `trellis
// daemon` both run it. It is the only package that imports both runtime and
// facade. daemon.json's format is package daemonfile (a leaf that clients
// read without linking the daemon). Its configuration comes from flags, the
// environment and a TOML file (--config; configfile.go, with the JSON
// Schema docs/trellisd.schema.json generated from FileConfig), checked as a
// whole (Validate, `config check`). Both mains call KeepSysmonAwake first:
// on Linux the process runs again with a GODEBUG setting that keeps the Go
// runtime's system monitor out of its deep sleep (sysmon.go says why).
//
// Start builds the daemon bottom-up. First the edge's listeners (HTTP,
// gRPC and the chat gateway's webhook receiver, so that the ports commands
// may not connect to are known), the token and the certificates; then
// newRuntimeServices builds the runtime in dependency order, each service
// given at construction what it needs, already made: the store (and, on a
// shared store, the cluster's token, the cluster node and the forwarder to
// the other daemons), the event log, the agent-definition store, providers,
// prices and settings, the tools, memory and skills, the session-origin
// registry and the approval broker that routes by it, the MCP servers, the
// backends and the toolbox, the sessions, the agents service, the chat
// gateway and last the job queue, which posts to the gateway's channels.
// Each resource registers its close as it is made; a failed start and the
// stop close them, the last made first (errors.Join). The gRPC server and
// then the facade come last, on top. Three cycles are real and stay
// closures over a service built later: the event log's held-events
// callback to the sessions, the cluster node's lease callbacks, and the
// sessions' sub-agents (the agents service runs sessions).
// internal/layering checks these rules: no setter, and no other closure
// reading a service assigned after it.
package daemon
