// Package mcpserver serves the daemon's agents and sessions as the tools of a
// Model Context Protocol server (streamable HTTP, at /mcp), so that another
// agent or an MCP host can run a Trellis agent on a task, prompt a session
// and list what there is. Each tool is a translation onto the runtime's gRPC
// services, as every other surface of the facade: a call runs as the caller
// (the daemon token, or an API key on whose behalf the facade calls), the
// approvals a turn needs go to the session's approvers as usual, a running
// turn reports each of its events as an MCP progress notification, and a
// cancelled call interrupts its turn.
package mcpserver
