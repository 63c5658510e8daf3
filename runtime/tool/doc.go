// Package tool owns the tools a model can call: the Registry that validates
// their arguments against each tool's JSON Schema, and the built-in tools
// (shell, file, search and web tools, confined to the session's workdir;
// memory, delegate_task and ask_user, which reach their services through
// narrow interfaces), and the tools clients lend to sessions (Lent:
// tool.register; a call goes back to the lending connection as tool.call).
// The remote backends' tools live in sshbackend and dockerbackend.
// A built-in tool's arguments are one Go struct: embedding Args[T] gives
// the tool the JSON Schema inferred from T's fields and tags, so the
// schema the model sees and the struct Run decodes are the same thing. A
// tool that is only its name, tag, description and one function of its
// arguments is a Func (NewFunc), which decodes them for the function.
//
// It also owns what keeps them away from the daemon: the Guard (the
// daemon's home, its secret files and other daemons' homes, by path and by
// inode, with an index the home's watcher keeps current), the shell
// sandbox (Landlock rules, user/PID/mount/network namespaces, and the
// command's init: the daemon's own executable, started again, which mounts
// a /proc of its own, refuses the control plane's ports and drops its
// capabilities before it becomes bash; in accept and auto modes, where
// slirp4netns is installed, a network namespace of the command's own whose
// outbound traffic slirp4netns carries, without the host's loopback), the
// same sandbox for the daemon's
// long-lived helper processes (ProcessSandbox: stdio MCP servers, ended as
// an interrupted command's tree is), the table of running process groups,
// and the retention of kept full outputs.
package tool
