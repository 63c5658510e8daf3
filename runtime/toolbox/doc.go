// Package toolbox gives a session's turns their tools and their approval
// gate: it adapts the tool registry (runtime/tool) and the approval policy
// and broker (runtime/approval) to the interfaces of the agent loop
// (runtime/agent).
package toolbox
