package testbin

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreePort returns a loopback TCP port that was free a moment ago, other
// than avoid, for a daemon a test starts on a port of its choosing. It is
// taken below the kernel's ephemeral range (ip_local_port_range, 32768 and
// up by default), so that it is not handed out as the source port of some
// other test's connection before the daemon binds it.
func FreePort(t testing.TB, avoid int) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	for range 1000 {
		port := 10000 + rand.IntN(low-10000)
		if port == avoid {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return 0
}
