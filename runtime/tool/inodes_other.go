//go:build !linux

package tool

// newWatcher: no directory watcher here; the index walks the protected
// directories again when a call meets a hard-linked file it does not know.
func newWatcher() watcher { return nil }
