package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestAuditKeepsNoURLCredentials: a URL a call carries (an MCP server's)
// is recorded in the audit log without its user information and query,
// where a credential travels; the host and path stay, to say what was
// changed.
func TestAuditKeepsNoURLCredentials(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	ctx := context.Background()
	const secret = "s3cr3t-t0ken"
	url := "http://bob:" + secret + "@127.0.0.1:1/mcp?token=" + secret + "#" + secret
	// The server cannot be reached: the call's outcome does not matter,
	// its audit record does.
	c.Call(ctx, "mcp.test", map[string]any{"type": "http", "url": url}, nil)
	var r struct {
		Events []struct {
			Method  string         `json:"method"`
			Request map[string]any `json:"request"`
		} `json:"events"`
	}
	if err := c.Call(ctx, "audit.list", map[string]any{}, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Events) == 0 || r.Events[0].Method != "mcp.test" {
		t.Fatalf("audit.list: %+v, want mcp.test first", r.Events)
	}
	if got := r.Events[0].Request["url"]; got != "http://127.0.0.1:1/mcp?***#***" {
		t.Errorf("the audited url is %q", got)
	}
	if b, _ := json.Marshal(r); strings.Contains(string(b), secret) {
		t.Fatalf("the audit log holds the URL's credential: %s", b)
	}
}
