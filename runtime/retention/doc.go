// Package retention owns the session retention policy: keep rules in the
// manner of restic's forget (a session is kept when any rule keeps it: it
// was active within an age, or it is among the latest N of its group) and
// the pure choice of which sessions a policy deletes, and why
// (docs/export.md, "Retention"). Deleting them is runtime/session's.
package retention
