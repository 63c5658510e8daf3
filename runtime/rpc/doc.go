// Package rpc is the runtime's gRPC edge: it validates requests, calls the
// plain-Go domain packages, and maps their errors to gRPC status in one table
// (errors.go). Interceptors (auth, recovery, error mapping) are assembled in
// server.go. No other runtime package imports grpc. Mutating methods
// ((access).mutating) called with an operation id (MDIdempotencyKey) pass
// Receipts (receipts.go): the first call's outcome is kept in the store and
// a repeat answers it, or operation_outcome_unknown when the daemon that
// acted stopped before storing it. A result with a (shown_once) field
// (key.create's secret) is kept sealed under the caller's own credential
// (receipts_sealed.go).
//
// Events leave the runtime in one shape, pages of stored event objects
// (page.go: trellisv1.EventPage), read by event log cursors: Subscribe and
// SubscribeSessions stream them; ResumeSession answers the first
// MaxResumeBytes of them in one page, and reads the next page of a client
// that pages through a session ahead (readahead.go). Typed events (the payload decoded
// into its message) are an opt-in of gRPC callers: SubscribeRequest.typed,
// ResumeSessionRequest.typed.
package rpc
