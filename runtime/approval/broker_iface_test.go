package approval_test

import (
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/toolbox"
)

// The broker and the allowlist are what the agent's gate and the session
// service expect.
var (
	_ toolbox.Asker     = (*approval.Broker)(nil)
	_ toolbox.Allowlist = (*approval.Allowlist)(nil)
	_ session.Approvals = (*approval.Broker)(nil)
)
