package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/daemon"
)

// TestMetricsOffLoopback: a daemon bound to every interface serves
// /metrics to loopback clients as before, and to a client on another
// address only with an API key (any role, here a viewer's): no key, a
// wrong key or the wrong scheme answers 401 and no metrics. The
// off-loopback client is this machine reached through its own
// non-loopback address; a machine with none skips.
func TestMetricsOffLoopback(t *testing.T) {
	ip := nonLoopbackIP(t)
	d := startDaemonWith(t, daemon.Config{Host: "0.0.0.0", InsecureNoTLS: true})
	admin := helloWS(t, d)
	_, viewerKey := makePrincipal(t, admin, "scraper", "viewer")
	local := fmt.Sprintf("http://127.0.0.1:%d/metrics", d.HTTPPort())
	remote := fmt.Sprintf("http://%s/metrics", net.JoinHostPort(ip, fmt.Sprint(d.HTTPPort())))
	for _, c := range []struct {
		name, url, key string
		want           int
	}{
		{"loopback, no key", local, "", 200},
		{"off loopback, no key", remote, "", 401},
		{"off loopback, a wrong key", remote, "tk_not-a-key", 401},
		{"off loopback, a viewer's key", remote, viewerKey, 200},
		{"off loopback, the daemon's token", remote, d.Token(), 200},
	} {
		code, body := httpGet(t, c.url, c.key)
		if code != c.want {
			t.Fatalf("%s: %d %.200s, want %d", c.name, code, body, c.want)
		}
		hasMetrics := strings.Contains(string(body), "trellis_jsonrpc_requests_total")
		if (code == 200) != hasMetrics {
			t.Fatalf("%s: %d, metrics in the body: %v", c.name, code, hasMetrics)
		}
	}
}

// nonLoopbackIP is an IPv4 address of this machine other than loopback.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no non-loopback IPv4 address to reach itself through")
	return ""
}
