// Package errcode holds the protocol's error codes (PROTOCOL.md §2), the one
// Go declaration of them: the string constants (errcode.NotFound, ...), each
// with its JSON-RPC numeric code and the gRPC code of the status that
// carries it, generated from errors.proto into codes.gen.go. The runtime
// builds its errors with these codes (runtime/errs) and maps them to gRPC
// status; the facade and the Go client build and read JSON-RPC error
// objects {code, message, data: {code, ...}} with Error. The package links
// no gRPC, so that every package of the module may name a code; turning a
// gRPC status back into an Error is package grpcerr's.
package errcode
