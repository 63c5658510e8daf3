// Package tool owns the tools a model can call: the Registry that validates
// their arguments against each tool's JSON Schema, and the built-in tools
// (shell, file, search and web tools), confined to the session's workdir.
package tool
