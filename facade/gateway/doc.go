// Package gateway serves the HTTP side of the facade behind Bearer-token
// auth: the REST mapping of the runtime's gRPC services (grpc-gateway,
// routes from proto/trellis/v1/http.yaml, errors rendered like JSON-RPC
// errors) and the per-session event streams (GET /v1/sessions/{id}/events
// as NDJSON or SSE in the events, wire and pi renderings of facade/wire).
package gateway
