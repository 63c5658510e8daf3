package tool

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ProcTable records the process groups of the commands running now in a
// file of the daemon's home, so that a daemon started after a crash can
// kill what its predecessor left running (ReapProcTable) before anything
// else runs. Each group is recorded with its leader's start time, so a
// reused pid is never mistaken for it. A nil *ProcTable records nothing.
type ProcTable struct {
	path string
	mu   sync.Mutex
	live map[int]uint64 // pgid → leader start time
}

// NewProcTable returns a table kept in path.
func NewProcTable(path string) *ProcTable {
	return &ProcTable{path: path, live: map[int]uint64{}}
}

func (t *ProcTable) add(pgid int) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.live[pgid] = startTime(pgid)
	t.writeLocked()
}

func (t *ProcTable) remove(pgid int) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.live, pgid)
	t.writeLocked()
}

// writeLocked rewrites the file atomically; a failure only weakens the
// crash clean-up, so it is not the command's problem.
func (t *ProcTable) writeLocked() {
	pgids := make([]int, 0, len(t.live))
	for p := range t.live {
		pgids = append(pgids, p)
	}
	sort.Ints(pgids)
	var b bytes.Buffer
	for _, p := range pgids {
		fmt.Fprintf(&b, "%d %d\n", p, t.live[p])
	}
	tmp := t.path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o600); err == nil {
		_ = os.Rename(tmp, t.path)
	}
}

// ReapProcTable kills every process group recorded in path by a daemon
// that did not get to remove it (it crashed), then empties the file. It
// returns the groups it killed.
func ReapProcTable(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var killed []int
	for _, e := range parseProcTable(b) {
		// Killed when the leader is still the one recorded (same start
		// time), or when the leader is gone but members are left: a pid is
		// not handed out again while a group of that id exists, so such a
		// group is the recorded one. A leader with another start time is a
		// reused pid, left alone.
		cur := startTime(e.pgid)
		if cur != 0 && cur == e.start || cur == 0 && groupAlive(e.pgid) {
			_ = syscall.Kill(-e.pgid, syscall.SIGKILL)
			killed = append(killed, e.pgid)
		}
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return killed, fmt.Errorf("empty %s: %w", filepath.Base(path), err)
	}
	return killed, nil
}

type procEntry struct {
	pgid  int
	start uint64
}

// parseProcTable reads the "pgid starttime" lines of a table, skipping
// malformed ones and groups 0 and 1 (never a command's).
func parseProcTable(b []byte) []procEntry {
	var out []procEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		pgid, err1 := strconv.Atoi(f[0])
		start, err2 := strconv.ParseUint(f[1], 10, 64)
		if err1 != nil || err2 != nil || pgid <= 1 || pgid > maxPID {
			continue
		}
		out = append(out, procEntry{pgid: pgid, start: start})
	}
	return out
}

// maxPID is Linux's PID_MAX_LIMIT: a larger number is no pid, and would
// be truncated to another one by kill(2).
const maxPID = 1 << 22
