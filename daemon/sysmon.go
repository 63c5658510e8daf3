package daemon

import "strings"

// sysmonSetting is the GODEBUG setting KeepSysmonAwake gives the daemon's
// process. The Go runtime's system monitor (sysmon) sleeps deeply while
// every P is idle, and a system call made while it does wakes it with its
// poll reset to every 20 µs (golang/go#18236): a daemon idle between the
// chunks of a model's stream paid that reset at every chunk, about 20
// wake-ups of sysmon's thread each, a quarter of the daemon's CPU per chunk
// (docs/performance.md, "sysmon"). With schedtrace set sysmon never sleeps
// deeply: it backs off to one wake-up every 10 ms while nothing happens. The
// interval is the largest the runtime takes (int32 milliseconds, 24.8
// days), so the scheduler line schedtrace prints comes at most that often.
const sysmonSetting = "schedtrace=2147483647"

// sysmonMarker, in the environment of the process KeepSysmonAwake starts,
// holds the GODEBUG to give back: "=" and its value, or "unset".
const sysmonMarker = "TRELLIS_GODEBUG_BEFORE"

// hasSetting reports whether the GODEBUG value godebug sets key.
func hasSetting(godebug, key string) bool {
	for _, f := range strings.Split(godebug, ",") {
		if k, _, ok := strings.Cut(f, "="); ok && k == key { // as the runtime reads it: no space trimmed
			return true
		}
	}
	return false
}
