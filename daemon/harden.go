package daemon

import (
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

// hardenProcess makes the daemon's process safer to run next to the
// commands it starts:
//   - not dumpable (Linux), so that a process of the same user cannot read
//     its memory or /proc/<pid>/environ, where provider keys may be;
//   - SIGPIPE handled, so that a closed stderr (trellisd --log-stderr |
//     head) fails the write instead of killing the daemon. A handled
//     signal, unlike an ignored one, is reset for the commands it runs.
func hardenProcess() {
	setNotDumpable()
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// bestEffort writes to w until the first failure, then drops everything:
// the log file stays the record, stderr is a convenience.
type bestEffort struct {
	w      interface{ Write([]byte) (int, error) }
	broken atomic.Bool
}

func (b *bestEffort) Write(p []byte) (int, error) {
	if b.broken.Load() {
		return len(p), nil
	}
	if _, err := b.w.Write(p); err != nil {
		b.broken.Store(true)
	}
	return len(p), nil
}
