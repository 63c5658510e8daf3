// Package version holds the daemon's version and the protocol version it
// speaks; both the runtime and the facade read them from here.
package version

import (
	"fmt"
	"strconv"
	"strings"
)

// Protocol is PROTOCOL_VERSION (semver). Clients whose major differs are refused.
const Protocol = "1.0.0"

// Server is the daemon's version; release builds set it with
// -ldflags "-X github.com/trellis-run/trellis/version.Server=…".
var Server = "0.1.0-dev"

// Major returns the major number of a semver string such as "1.2.3" or "v1.2".
func Major(v string) (int, error) {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	head, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(head)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a semantic version (want MAJOR.MINOR.PATCH)", v)
	}
	return n, nil
}
