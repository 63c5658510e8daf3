//go:build trellis_lean

package browser

import (
	"context"
	"errors"

	"github.com/trellis-run/trellis/runtime/tool"
)

// A lean build (-tags trellis_lean, the README's first run) leaves
// Chromium's driver out: the tool answers browser_provider_unavailable.
var errLean = errors.New("this build of trellis leaves the browser's driver out (-tags trellis_lean); build without the tag to use it")

type local struct{ proxy *proxy }

func startLocal(string, string, *proxy) (*local, error) { return nil, errLean }

func (l *local) close() {}

func (l *local) do(context.Context, args, tool.Call) tool.Result { return tool.Failed("%s", errLean) }
