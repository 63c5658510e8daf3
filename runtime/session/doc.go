// Package session owns session lifecycle: create, list, resume, close,
// prompts and their queue, interrupts, compaction, modes, slash commands, and
// restoring sessions after a restart. Each live session is an actor: one
// goroutine runs its turns one after another from its queue; the agent loop
// (runtime/agent) does the work of a turn and every event goes through the
// durable event log.
package session
