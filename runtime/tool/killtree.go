package tool

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// treeKill is how the processes of a command were ended, for its result.
type treeKill struct {
	namespace bool // the command ran in a PID namespace of its own
	shell     bool // its shell (the namespace's process 1) was stopped, then killed
	termed    int  // processes sent SIGTERM
	killed    int  // processes still running after the grace period, sent SIGKILL
	left      int  // processes still running after SIGKILL (group only)
}

// commandNamespace returns the PID namespace of the command whose first
// process is pid, "" when it runs in the daemon's (no namespace of its own,
// or it is gone already).
func commandNamespace(pid int) string {
	ns := pidNamespace(pid)
	if ns == "" || ns == pidNamespace(os.Getpid()) {
		return ""
	}
	return ns
}

// killTree ends every process of a command: pid is its first process, the
// leader of its process group and, when ns is set, process 1 of PID
// namespace ns.
func killTree(pid int, ns string, grace time.Duration) treeKill {
	if ns != "" {
		return killNamespace(pid, ns, grace)
	}
	return endGroup(pid, grace)
}

// killNamespace ends a command that is process 1 of its own PID namespace.
// The kernel delivers to a namespace's process 1 only the signals it
// handles (SIGKILL and SIGSTOP aside), so the shell ignores SIGTERM, and
// it would run the command's next step (`sleep 5; date > f`) the moment
// the running one died. So the shell is stopped first; every other process
// of the namespace, setsid ones included, gets SIGTERM and the grace
// period; then SIGKILL to the shell makes the kernel kill whatever is left
// of the namespace. The shell is reaped (the caller's Wait returns) only
// once no process of the namespace is left.
func killNamespace(init int, ns string, grace time.Duration) treeKill {
	k := treeKill{namespace: true}
	if pidNamespace(init) != ns {
		return k // it ended, and the kernel ended its namespace with it
	}
	_ = syscall.Kill(init, syscall.SIGSTOP)
	k.shell = true
	others := nsMembers(ns, init)
	k.termed = len(others)
	for _, p := range others {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	if len(others) > 0 && !waitUntil(grace, func() bool { return len(nsMembers(ns, init)) == 0 }) {
		k.killed = len(nsMembers(ns, init))
	}
	_ = syscall.Kill(init, syscall.SIGKILL)
	return k
}

// endGroup ends every process of group pgid as a stopped command's are
// ended: SIGTERM, then SIGKILL to whatever still runs after grace. Call it
// only while the group's leader has not been reaped, or while members are
// known to be left: a pid is not handed out again while a group of that id
// exists, but may be once it is empty.
func endGroup(pgid int, grace time.Duration) treeKill {
	var k treeKill
	if pgid <= 1 || !groupAlive(pgid) {
		return k
	}
	k.termed = len(groupMembers(pgid))
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	if waitUntil(grace, func() bool { return !groupAlive(pgid) }) {
		return k
	}
	k.killed = len(groupMembers(pgid))
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if !waitUntil(killWait, func() bool { return !groupAlive(pgid) }) {
		k.left = max(1, len(groupMembers(pgid)))
	}
	return k
}

// killWait bounds the wait for SIGKILL to take effect on a group.
const killWait = 500 * time.Millisecond

// waitUntil polls cond until it holds, for at most d; it reports whether
// it held.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for !cond() {
		select {
		case <-poll.C:
		case <-deadline.C:
			return cond()
		}
	}
	return true
}

// describe says, for a stopped command's result, what happened to its
// processes.
func (k treeKill) describe(grace time.Duration) string {
	var parts []string
	if n := k.termed - k.killed; n > 0 {
		parts = append(parts, fmt.Sprintf("%d by SIGTERM", n))
	}
	if k.killed > 0 {
		parts = append(parts, fmt.Sprintf("%d by SIGKILL after the %s grace", k.killed, grace))
	}
	if k.namespace {
		if !k.shell {
			return "it had ended already, and every process it started with it; none is left"
		}
		// The shell was stopped before anything else was signalled: it
		// ran nothing more.
		parts = append(parts, "its main process, stopped first, by SIGKILL")
		return "it and every process it started were ended (" + strings.Join(parts, ", ") + "); none is left"
	}
	msg := "its process group was ended"
	if len(parts) > 0 {
		msg += " (" + strings.Join(parts, ", ") + ")"
	}
	if k.left > 0 {
		return msg + fmt.Sprintf("; %d of its processes still ran after SIGKILL", k.left)
	}
	return msg + "; none of it is left"
}
