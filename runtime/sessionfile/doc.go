// Package sessionfile owns the portable session file (docs/export.md):
// one session's row, events with their stored bytes, model history and
// its journal (from version 2; version 1 files still import), checkpoint
// blobs and checkpoints as JSON lines between a versioned
// header and a trailer of counts and a SHA-256. Export writes it from a
// store as it reads; Import checks a whole file before it writes
// anything, then creates the session in one store transaction.
package sessionfile
