// Package gateway serves the REST mapping of the runtime's gRPC services
// (grpc-gateway, routes from proto/trellis/v1/http.yaml) behind Bearer-token
// auth, with errors rendered like JSON-RPC errors.
package gateway
