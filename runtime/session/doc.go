// Package session owns session lifecycle: create, list, resume, close,
// prompts and what happens to one sent while a turn runs (queued, refused,
// interrupting, rolling the turn back, or steered into it), the queue a
// client can list and edit, interrupts, compaction, modes, slash commands, and
// restoring sessions after a restart, and budgets (a turn that would pass
// its session's or principal's budget pauses, asks for a raise through the
// approval queue, and is picked up again after a restart or a takeover),
// and checkpoints of the workdir (recorded from a turn before the tools
// that may change it and at its end, listed, diffed, restored and deleted;
// runtime/workspace does the file work, watching the workdirs of the 32
// sessions that recorded most recently so that a checkpoint reads only
// what changed; store.CheckpointStore keeps them),
// and archiving (a read-only session) and the export and import of a
// session as a file (runtime/sessionfile owns its format),
// and the session's workdir on this daemon: a managed one, made under the
// workspace root and rebuilt from the latest checkpoint before the first
// turn a daemon runs, or a named one, whose absence refuses the prompt,
// and forking a session, or rewinding it, at one of its events: files from
// the checkpoints, model history from the store's history journal,
// and pruning the saved sessions a retention policy keeps none of
// (runtime/retention chooses them; they are deleted as session.deleteSaved
// deletes, an idle live one included).
// Each live session is an actor: one
// goroutine runs its turns one after another from its queue; the agent loop
// (runtime/agent) does the work of a turn and every event goes through the
// durable event log.
package session
