//go:build !linux

package daemon

// KeepSysmonAwake does nothing here: the daemon's figures are measured on
// Linux (see sysmon.go).
func KeepSysmonAwake() {}
