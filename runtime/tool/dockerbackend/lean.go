//go:build trellis_lean

package dockerbackend

import (
	"context"
	"errors"

	"github.com/trellis-run/trellis/runtime/tool"
)

// A lean build (-tags trellis_lean, the README's first run) leaves the
// Docker Engine client out: backend.set {kind: docker} is refused.
var errLean = errors.New("this build of trellis leaves the Docker Engine client out (-tags trellis_lean); build without the tag to use the docker backend")

// ErrLeftOut tells whether err says the engine client is not in this build.
func ErrLeftOut(err error) bool { return errors.Is(err, errLean) }

// Engine is the docker backend of a lean build: it has no engine.
type Engine struct{}

// New returns the lean build's engine.
func New(string, ...string) *Engine { return &Engine{} }

func (*Engine) Check(context.Context, Config) error { return errLean }

func (*Engine) Registry(string, string, Config) (*tool.Registry, error) { return nil, errLean }

func (*Engine) CloseSession(context.Context, string) error { return nil }

func (*Engine) Reap(context.Context) (int, error) { return 0, nil }

func (*Engine) Close() error { return nil }
