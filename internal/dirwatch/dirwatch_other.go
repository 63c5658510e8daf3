//go:build !linux

package dirwatch

// Watcher is not available on this system.
type Watcher struct{}

// New fails with ErrUnsupported.
func New(Op) (*Watcher, error) { return nil, ErrUnsupported }

// Add fails with ErrUnsupported.
func (*Watcher) Add(string) error { return ErrUnsupported }

// Watching reports false.
func (*Watcher) Watching(string) bool { return false }

// Drain reports nothing.
func (*Watcher) Drain(func(Event)) bool { return false }

// Close does nothing.
func (*Watcher) Close() error { return nil }
