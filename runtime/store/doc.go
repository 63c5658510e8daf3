// Package store defines Trellis's persistent state as one backend-neutral interface.
//
// Store groups sessions, session events, model-facing history, allowlist
// patterns, the approval audit log, key/value settings, principals with
// their API keys (kept as hashes; the last admin principal can be neither
// deleted nor demoted: ErrLastAdmin), the receipts of calls made with an
// operation id (ReceiptStore: begun before the call acts, finished with its
// outcome, expired by the store's clock), the checkpoints of sessions'
// workdirs with the content blobs they name (CheckpointStore: blobs
// addressed by hash, once per session, in chunks; gone with their
// session and with the last checkpoint naming them) and memory notes
// (searched by full-text relevance over the words Words finds, which every
// backend indexes alike). Backends live in subpackages (sqlite, postgres)
// and run the shared suite in store/conformance; the SQL they share is one
// layer, store/sqlstore, with a flavor per dialect, and each keeps beside it
// what its database does its own way. Failures are reported with the sentinels ErrNotFound,
// ErrConflict and ErrInvalid, wrapped with %w. EventStore's ScanEvents
// hands each stored event row to a callback with its bytes still in the
// driver's buffers (the event log's replay renders pages with it, without a
// value per row). SumUsage totals the tokens and
// cost of the usage events of a time window by provider, model, session or
// day (usage.summary), or one session's by turn (session.usage).
//
// ClusterStore keeps what daemons sharing a store coordinate through: the
// daemon registry and leases (a session's, or a resource's such as a job's
// claim), each with an epoch that rises at every acquisition. Every write
// of rows a lease guards (a session's events, row, history and deletion;
// settings) takes a Writer: Under the fences of the leases it is made under
// (Lease.Fence), checked against the lease rows in the write's own
// transaction, or Unfenced (a daemon alone on its store, or rows no lease
// guards). A write of a session the writer has no fence on, any write of
// the zero Writer, and any write of a daemon whose lease was taken over
// are refused with ErrLeaseLost and change nothing: no write is unfenced
// by omission.
//
// Times are kept to the microsecond and returned in UTC. JSON values come back
// semantically equal to what was written (a backend may normalise whitespace
// and key order); a nil JSON value is stored as JSON null unless a field says
// otherwise.
package store
