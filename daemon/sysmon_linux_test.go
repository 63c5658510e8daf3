package daemon

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// sysmonReport is what the child of TestKeepSysmonAwake prints: GODEBUG as
// the runtime read it when the process started (/proc/self/environ), and
// as the commands the daemon runs would inherit it.
type sysmonReport struct {
	PID                int
	Started, Now       string
	StartedSet, NowSet bool
	MarkerLeft         bool
}

func TestKeepSysmonAwake(t *testing.T) {
	if os.Getenv("TRELLIS_TEST_SYSMON_CHILD") == "1" {
		KeepSysmonAwake()
		r := sysmonReport{PID: os.Getpid()}
		initial, err := os.ReadFile("/proc/self/environ")
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range bytes.Split(initial, []byte{0}) {
			if v, ok := strings.CutPrefix(string(kv), "GODEBUG="); ok {
				r.Started, r.StartedSet = v, true
			}
		}
		r.Now, r.NowSet = os.LookupEnv("GODEBUG")
		_, r.MarkerLeft = os.LookupEnv(sysmonMarker)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		os.Exit(0)
	}
	unset := "(unset)"
	for _, tc := range []struct {
		name, godebug, started, now string
	}{
		{name: "no GODEBUG", godebug: unset, started: sysmonSetting, now: unset},
		{name: "empty GODEBUG", godebug: "", started: sysmonSetting, now: ""},
		{name: "the user's settings", godebug: "madvdontneed=1", started: "madvdontneed=1," + sysmonSetting, now: "madvdontneed=1"},
		{name: "the user's schedtrace", godebug: "gctrace=0,schedtrace=0", started: "gctrace=0,schedtrace=0", now: "gctrace=0,schedtrace=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestKeepSysmonAwake$")
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "GODEBUG=") && !strings.HasPrefix(kv, sysmonMarker+"=") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, "TRELLIS_TEST_SYSMON_CHILD=1")
			if tc.godebug != unset {
				cmd.Env = append(cmd.Env, "GODEBUG="+tc.godebug)
			}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("child: %v\n%s", err, out.Bytes())
			}
			var r sysmonReport
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("child printed %q: %v", out.Bytes(), err)
			}
			show := func(v string, set bool) string {
				if !set {
					return unset
				}
				return v
			}
			if got := show(r.Started, r.StartedSet); got != tc.started {
				t.Errorf("the runtime started with GODEBUG %q, want %q", got, tc.started)
			}
			if got := show(r.Now, r.NowSet); got != tc.now {
				t.Errorf("commands would inherit GODEBUG %q, want %q (the user's)", got, tc.now)
			}
			if r.MarkerLeft {
				t.Errorf("%s left in the environment", sysmonMarker)
			}
			if r.PID != cmd.Process.Pid {
				t.Errorf("pid %d, want the started process's %d", r.PID, cmd.Process.Pid)
			}
		})
	}
}
