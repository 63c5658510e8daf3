// Package agents owns agent definitions (markdown files in <home>/agents/)
// and the sub-agents that run them: each sub-agent is a session of kind
// subagent started for a parent session, limited in number, whose progress
// is reported on the parent as subagent.spawn, subagent.update and
// subagent.done events; a team is a task split among such sub-agents, each
// in its own git worktree when the parent's workdir is a repository.
package agents
