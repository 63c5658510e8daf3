package dirwatch

import "errors"

// Op is what happened to a path, as a set of bits.
type Op uint32

const (
	// Created: the path was created in, or moved into, a watched
	// directory.
	Created Op = 1 << iota
	// Removed: the path was deleted from, or moved out of, a watched
	// directory.
	Removed
	// Written: a file's content or attributes changed (its mode, its
	// times, its links); for a watched directory's own attributes, the
	// path is the directory.
	Written
	// Moved: a watched directory itself was moved, so the paths reported
	// under it from now on would be wrong (the path is its old one).
	Moved
)

// Event is one change.
type Event struct {
	// Path is the watched directory as Add was given it, joined with the
	// name of what changed in it (the directory itself for Moved and for
	// a change of its own attributes).
	Path string
	Op   Op
	// Dir says the path is a directory (as the kernel reported it).
	Dir bool
}

// ErrUnsupported is New's error where the system has no change
// notifications.
var ErrUnsupported = errors.New("dirwatch: this system has no directory change notifications")
