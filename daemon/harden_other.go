//go:build !linux

package daemon

// setNotDumpable has no equivalent here.
func setNotDumpable() {}
