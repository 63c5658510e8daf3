// Package mcp owns the MCP client: it reads mcpServers configurations
// (the Claude Desktop format), starts stdio and streamable-HTTP servers
// lazily with the official Go SDK, restarts them with backoff, and offers
// their tools as mcp__SERVER__TOOL in a tool.Registry.
package mcp
