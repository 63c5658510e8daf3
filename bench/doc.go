// Package bench measures Trellis's speed and memory as ratios against
// baselines measured in the same run, on the same machine: the WebSocket
// facade against direct gRPC (Fanout), group commit against one transaction
// per event and a raw bulk insert (Append), the daemon's memory per idle
// connection (Conns), many sessions streaming at once (Sessions),
// session.resume against a raw scan of the same rows (Replay), three
// daemons on one PostgreSQL database against one (Scale), whether the
// daemon's resources stay flat while thousands of sessions come and go
// over minutes (Soak), a model's stream through the real openai provider
// against reading it directly (Stream), and how many paced sessions one
// daemon carries within a latency limit (Density).
//
// Each bench is one function taking its options and returning a Result,
// which renders as a table and as one JSON line; `trellis bench` prints
// both. A bench starts a fresh daemon with a temporary home and a fake
// model script written by the bench, in this process or (Daemon.Command) as
// a child process, with the daemon's defaults, and stops it at the end (Scale starts several, as child
// processes, on a fresh database of a PostgreSQL server); Conns can also measure a
// running daemon (Daemon.Home). The daemon merges model chunks that wait
// for one commit into one message.delta event, so the streaming benches
// count the chunks in the text each client receives (turnRecorder), not
// events; only Replay, whose unit is the stored event, seeds with merging
// off. docs/performance.md explains every figure and records the latest
// numbers.
//
// Benches measure; they do not judge. A Result carries the targets of the
// issue that asked for it (e.g. facade ≥ 0.8 of direct gRPC) and says
// whether they were met, but nothing here fails because a machine is slow.
package bench
