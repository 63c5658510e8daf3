// Command protoc-gen-trellis is the protoc plugin that turns the annotated
// .proto files under proto/trellis/v1 into the protocol's derived artefacts:
// the facade's explicit JSON-RPC method table
// (facade/methods/methods.gen.go), the /protocol.json document
// (facade/methods/protocol.json), the reference documentation
// (docs/protocol.md), the TypeScript SDK types (sdk/src/protocol.ts) and the
// OpenAPI 3.1 document of the REST mapping (facade/methods/openapi.json,
// served at /openapi.json), whose routes it reads from the grpc-gateway HTTP
// rules named by the plugin option http=proto/trellis/v1/http.yaml. It also
// writes the Go tables the code shares: the error codes
// (protocol/errcode/codes.gen.go), the event kinds
// (proto/trellis/v1/eventkind), the event payload types
// (protocol/events/payloads.gen.go), the authorization table
// (runtime/rpc/authz.gen.go), the roles page (docs/roles.md) and the Go
// client's typed calls (client/calls.gen.go).
//
// It runs last in buf.gen.yaml with `strategy: all` and `out: .`, so it sees
// every file in one request and writes paths relative to the repository root.
// Output is deterministic: no timestamps, no tool versions, sorted or
// declaration-ordered collections only.
//
// The plugin reads our custom options (options.proto) from the descriptors
// in the request, through dynamic extension types, so it never depends on
// the Go code generated from those same files.
package main
