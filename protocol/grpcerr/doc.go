// Package grpcerr is the one place where the error of a gRPC call becomes a
// JSON-RPC error object (PROTOCOL.md §2 and §9): a status carrying a Trellis
// ErrorInfo keeps its reason as data.code and its metadata as data; a status
// without one is mapped by its gRPC code through errcode's generated
// fallback table; anything else, and every internal error, is masked with
// an error id and logged. It is apart from package errcode, which holds the
// codes themselves, so that the runtime's domain packages can name a code
// without linking gRPC.
package grpcerr
