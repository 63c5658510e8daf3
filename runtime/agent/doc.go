// Package agent runs one turn of a session: it calls the model provider,
// streams its answer as session events, runs the tool calls the model asks
// for (each authorized first) and feeds their results back, with any user
// messages steered into the turn meanwhile, until the model answers without
// tools or the turn must stop, asking its Checkpoints, when set, to record
// the workdir before each tool that may change it and at the end of such a
// turn. Its dependencies are small interfaces defined here (Emitter, Tools,
// Gate, History, Checkpoints) that other packages adapt to; the event
// order and payloads are those of PROTOCOL.md §7.
package agent
