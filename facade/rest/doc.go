// Package rest serves the HTTP side of the facade behind Bearer-token
// auth: the REST mapping of the runtime's gRPC services (grpc-gateway,
// routes from proto/trellis/v1/http.yaml, described by the generated
// facade/methods/openapi.json) and the per-session event streams (GET
// /v1/sessions/{id}/events as NDJSON or SSE in the events, wire and pi
// renderings of facade/wire). REST speaks the JSON of JSON-RPC: its
// marshaler is protocol/codec (a body is the JSON-RPC result), params in a
// body or a query string are decoded with the codec's strict rules, and
// errors are the JSON-RPC error objects.
package rest
