//go:build trellis_lean

package sshbackend

import (
	"context"
	"errors"

	"github.com/trellis-run/trellis/runtime/tool"
)

// A lean build (-tags trellis_lean, the README's first run) leaves the ssh
// client out: backend.set {kind: ssh} is refused.
var errLean = errors.New("this build of trellis leaves the ssh client out (-tags trellis_lean); build without the tag to use the ssh backend")

// ErrLeftOut tells whether err says the ssh client is not in this build.
func ErrLeftOut(err error) bool { return errors.Is(err, errLean) }

// Pool is the ssh backend of a lean build: it connects to nothing.
type Pool struct{}

// NewPool returns the lean build's pool.
func NewPool() *Pool { return &Pool{} }

// Check refuses every config.
func (*Pool) Check(context.Context, Config) error { return errLean }

// Registry has no tools to give.
func (*Pool) Registry(Config) (*tool.Registry, error) { return nil, errLean }

// Close has nothing to close.
func (*Pool) Close() {}
