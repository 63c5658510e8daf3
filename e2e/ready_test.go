package e2e

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TestPostgresReadiness: a daemon whose PostgreSQL stops answering leaves
// the load balancer (GET /ready answers 503, naming the store) but is not
// restarted (GET /health stays 200), and is ready again once the store
// answers. The link to the server goes through a proxy the test cuts.
func TestPostgresReadiness(t *testing.T) {
	dsn := pgtest.FreshDatabase(t, pgtest.Server(t))
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startTCPProxy(t, u.Host)
	p := startProc(t, t.TempDir(), "--store", viaProxy(t, dsn, proxy.addr()))
	base := fmt.Sprintf("http://127.0.0.1:%d", p.info.Port)
	// waitReady polls /ready until it answers code, and returns the body.
	waitReady := func(code int) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, body := httpGet(t, base+"/ready", "")
			if got == code {
				return strings.TrimSpace(string(body))
			}
			if time.Now().After(deadline) {
				t.Fatalf("/ready still answers %d %s, want %d", got, body, code)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if body := waitReady(200); body != `{"status":"ready"}` {
		t.Fatalf("/ready with the store up: %s", body)
	}
	proxy.setCut(true)
	if body := waitReady(503); body != `{"reason":"the postgres store does not answer","status":"unavailable"}` {
		t.Fatalf("/ready with the store cut off: %s", body)
	}
	if code, body := httpGet(t, base+"/health", ""); code != 200 {
		t.Fatalf("/health with the store cut off: %d %s (liveness must not depend on the store)", code, body)
	}
	proxy.setCut(false)
	waitReady(200)
}
