// Package mcp owns the MCP client: it reads mcpServers configurations
// (the Claude Desktop format), starts stdio and streamable-HTTP servers
// lazily with the official Go SDK, restarts them with backoff, and offers
// their tools as mcp__SERVER__TOOL in a tool.Registry.
//
// A stdio server runs in the shell tool's sandbox (Options.Sandbox, a
// tool.ProcessSandbox): the daemon's home and secret files unreadable, a
// PID namespace and /proc of its own, the network of accept mode. When its
// connection ends, it has a moment to exit, then it and every process it
// started are ended as an interrupted command's are.
package mcp
