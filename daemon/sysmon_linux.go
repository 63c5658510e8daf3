package daemon

import (
	"os"
	"strings"
	"syscall"
)

// KeepSysmonAwake makes the running program (a daemon's main, before it
// starts anything) run with sysmonSetting: the runtime reads schedtrace
// only when a process starts, so it replaces the process with the same
// program, arguments and pid, the setting added to GODEBUG. In the new
// process it gives GODEBUG back its value before (the runtime keeps the
// setting), so that the commands the daemon runs inherit the user's
// environment, not the setting. A GODEBUG that sets schedtrace already is
// the user's choice and is left alone; if the exec fails the daemon runs
// as it is.
func KeepSysmonAwake() {
	if before, ok := os.LookupEnv(sysmonMarker); ok {
		os.Unsetenv(sysmonMarker)
		if v, ok := strings.CutPrefix(before, "="); ok {
			os.Setenv("GODEBUG", v)
		} else {
			os.Unsetenv("GODEBUG")
		}
		return
	}
	godebug, set := os.LookupEnv("GODEBUG")
	if hasSetting(godebug, "schedtrace") {
		return
	}
	before, with := "unset", sysmonSetting
	if set {
		before = "=" + godebug
		if godebug != "" {
			with = godebug + "," + sysmonSetting
		}
	}
	env := make([]string, 0, len(os.Environ())+2)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GODEBUG=") {
			env = append(env, kv)
		}
	}
	env = append(env, "GODEBUG="+with, sysmonMarker+"="+before)
	_ = syscall.Exec("/proc/self/exe", os.Args, env) // returns only if it failed
}
