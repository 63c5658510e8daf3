package tool

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"
)

func TestParseProcTable(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []procEntry
	}{
		{"", nil},
		{"123 456\n", []procEntry{{123, 456}}},
		{"123 456\n789 0\n", []procEntry{{123, 456}, {789, 0}}},
		{"1 5\n0 5\n-3 5\n", nil},
		{"99999999999 5\n4194305 1\n", nil},
		{"12 x\nfoo 1\n12\n12 3 4\n", nil},
		{"  42   7  \n\n", []procEntry{{42, 7}}},
	} {
		if got := parseProcTable([]byte(tc.in)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseProcTable(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func FuzzParseProcTable(f *testing.F) {
	f.Add([]byte("123 456\n"))
	f.Add([]byte("1 2 3\n\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, e := range parseProcTable(b) {
			if e.pgid <= 1 || e.pgid > maxPID {
				t.Fatalf("entry %v out of range", e)
			}
		}
	})
}

// startGroup starts `sleep 60` leading a process group of its own.
func startGroup(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func TestReapProcTableKillsRecordedGroups(t *testing.T) {
	path := filepath.Join(t.TempDir(), "commands.pgid")
	tab := NewProcTable(path)
	recorded := startGroup(t)
	tab.add(recorded.Process.Pid)
	// A group recorded with another start time is a reused pid: spared.
	reused := startGroup(t)
	b, _ := os.ReadFile(path)
	b = append(b, fmt.Sprintf("%d %d\n", reused.Process.Pid, startTime(reused.Process.Pid)+1)...)
	os.WriteFile(path, b, 0o600)

	killed, err := ReapProcTable(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(killed, []int{recorded.Process.Pid}) {
		t.Errorf("killed %v, want [%d]", killed, recorded.Process.Pid)
	}
	waited := make(chan error, 1)
	go func() { waited <- recorded.Wait() }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the recorded group still runs 10 s after the reap")
	}
	if !groupAlive(reused.Process.Pid) {
		t.Error("a group whose leader has another start time was killed")
	}
	if b, _ := os.ReadFile(path); len(b) != 0 {
		t.Errorf("the table was not emptied: %q", b)
	}
	if killed, err := ReapProcTable(filepath.Join(t.TempDir(), "absent")); err != nil || killed != nil {
		t.Errorf("absent table: %v %v", killed, err)
	}
}

func TestProcTableRecordsRunningCommands(t *testing.T) {
	path := filepath.Join(t.TempDir(), "commands.pgid")
	tab := NewProcTable(path)
	tab.add(4242)
	tab.add(77)
	b, _ := os.ReadFile(path)
	if got := parseProcTable(b); len(got) != 2 || got[0].pgid != 77 || got[1].pgid != 4242 {
		t.Errorf("table %q", b)
	}
	tab.remove(4242)
	tab.remove(77)
	if b, _ := os.ReadFile(path); len(b) != 0 {
		t.Errorf("table after removal %q", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
}
