package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/trellis-run/trellis/daemon"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

func TestGRPCReflectionHealthAndAuth(t *testing.T) {
	d := startDaemon(t)
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()

	// `grpcurl list` = reflection ListServices, without a token.
	stream, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		listed = append(listed, s.GetName())
	}
	for _, want := range []string{"SystemService", "SessionService", "ToolService", "ApprovalService", "JobService",
		"ProviderService", "AgentService", "GatewayService", "MemoryService", "SkillService", "BackendService"} {
		if !contains(listed, "trellis.v1."+want) {
			t.Errorf("reflection does not list trellis.v1.%s: %v", want, listed)
		}
	}
	if !contains(listed, "grpc.health.v1.Health") {
		t.Errorf("health service not listed: %v", listed)
	}

	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without token: %v %v", hc, err)
	}

	_, err = trellisv1.NewSystemServiceClient(conn).Info(ctx, &trellisv1.InfoRequest{})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Info without token: %v, want Unauthenticated", err)
	}
	_, err = trellisv1.NewSessionServiceClient(conn).ListSessions(ctx, &trellisv1.ListSessionsRequest{})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("ListSessions without token: %v, want Unauthenticated", err)
	}
}

func TestHTTPSurfaces(t *testing.T) {
	d := startDaemon(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", d.HTTPPort())
	if code, body := httpGet(t, base+"/health", ""); code != 200 || strings.TrimSpace(string(body)) != `{"status":"ok"}` {
		t.Fatalf("/health: %d %s", code, body)
	}
	if code, body := httpGet(t, base+"/ready", ""); code != 200 || strings.TrimSpace(string(body)) != `{"status":"ready"}` {
		t.Fatalf("/ready: %d %s", code, body)
	}
	code, body := httpGet(t, base+"/version", "")
	var v map[string]string
	if code != 200 || json.Unmarshal(body, &v) != nil || v["protocolVersion"] != "1.0.0" || v["version"] == "" {
		t.Fatalf("/version: %d %s", code, body)
	}
	code, body = httpGet(t, base+"/metrics", "")
	if code != 200 || !strings.Contains(string(body), "trellis_websocket_connections") || !strings.Contains(string(body), "go_goroutines") {
		t.Fatalf("/metrics: %d %.200s", code, body)
	}
	if code, _ := httpGet(t, base+"/v1/system/info", ""); code != 401 {
		t.Fatalf("REST without token: %d, want 401", code)
	}
	if code, _ := httpGet(t, base+"/v1/system/info", "wrong"); code != 401 {
		t.Fatalf("REST with a bad token: %d, want 401", code)
	}
	code, body = httpGet(t, base+"/v1/system/info", d.Token())
	var info map[string]any
	if code != 200 || json.Unmarshal(body, &info) != nil || info["protocolVersion"] != "1.0.0" {
		t.Fatalf("REST system/info: %d %s", code, body)
	}
	code, body = httpGet(t, base+"/v1/session/list", d.Token())
	if code != 200 || !strings.Contains(string(body), `"sessions"`) {
		t.Fatalf("REST session/list: %d %s", code, body)
	}
	code, body = httpGet(t, base+"/v1/gateway/list", d.Token())
	if code != 200 || strings.TrimSpace(string(body)) != `{"bindings":[]}` {
		t.Fatalf("REST gateway/list: %d %s", code, body)
	}
}

func TestDaemonFiles(t *testing.T) {
	d := startDaemon(t)
	info, err := json.Marshal(struct{}{})
	_ = info
	if err != nil {
		t.Fatal(err)
	}
	home := d.Home()
	for _, name := range []string{"token", "daemon.json"} {
		st, err := os.Stat(filepath.Join(home, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", name, st.Mode().Perm())
		}
	}
	b, _ := os.ReadFile(filepath.Join(home, "daemon.json"))
	var df map[string]any
	if err := json.Unmarshal(b, &df); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"port", "grpcPort", "pid", "token", "startedAt", "protocolVersion", "version"} {
		if _, ok := df[k]; !ok {
			t.Errorf("daemon.json lacks %s: %s", k, b)
		}
	}
	if int(df["port"].(float64)) != d.HTTPPort() || df["token"] != d.Token() {
		t.Errorf("daemon.json disagrees with the daemon: %s", b)
	}
	d.Stop()
	if _, err := os.Stat(filepath.Join(home, "daemon.json")); !os.IsNotExist(err) {
		t.Fatalf("daemon.json still there after a clean stop: %v", err)
	}
	logs, _ := os.ReadFile(filepath.Join(home, "logs", "trellisd.log"))
	if strings.Contains(string(logs), d.Token()) {
		t.Fatal("the token appears in the daemon log")
	}
}

// TestProtocolDocumentMatchesSpec compares /protocol.json with the lists of
// PROTOCOL.md: methods (§4, §5), notifications (§6), session event kinds
// (§7, plus the step kinds WIRE-FORMATS.md asks for) and error codes (§2).
func TestProtocolDocumentMatchesSpec(t *testing.T) {
	d := startDaemon(t)
	_, body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/protocol.json", d.HTTPPort()), "")
	var doc struct {
		ProtocolVersion   string                     `json:"protocolVersion"`
		ServerVersion     string                     `json:"serverVersion"`
		Methods           map[string]json.RawMessage `json:"methods"`
		Notifications     map[string]json.RawMessage `json:"notifications"`
		SessionEventKinds map[string]json.RawMessage `json:"sessionEventKinds"`
		ErrorCodes        []struct {
			Code    string `json:"code"`
			Numeric int    `json:"numeric"`
		} `json:"errorCodes"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.ProtocolVersion != "1.0.0" || doc.ServerVersion == "" {
		t.Fatalf("versions: %q %q", doc.ProtocolVersion, doc.ServerVersion)
	}
	spec := specLists(t)
	// check: everything PROTOCOL.md lists is served, and nothing else is
	// (Trellis's additions are taken out first, below).
	check := func(what string, got []string, want []string) {
		sort.Strings(got)
		sort.Strings(want)
		var missing, unlisted []string
		for _, w := range want {
			if !contains(got, w) {
				missing = append(missing, w)
			}
		}
		for _, g := range got {
			if !contains(want, g) {
				unlisted = append(unlisted, g)
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s of PROTOCOL.md not served: %v", what, missing)
		}
		if len(unlisted) > 0 {
			t.Errorf("%s served beyond PROTOCOL.md and not listed in the test's additions: %v", what, unlisted)
		}
	}
	// Trellis's additions to PROTOCOL.md's lists, each documented in the
	// repository's docs (the file named here says what it is).
	additions := map[string]string{
		"mcp.list": "README.md", "mcp.changed": "README.md",
		"unsupported": "docs/compat.md", "payload_too_large": "docs/protocol.md",
		"store_unavailable": "docs/protocol.md", "store_busy": "docs/protocol.md",
		"forbidden": "docs/security.md", "principal.create": "docs/security.md", "principal.list": "docs/security.md",
		"principal.update": "docs/security.md", "principal.delete": "docs/security.md", "key.create": "docs/security.md",
		"key.list": "docs/security.md", "key.revoke": "docs/security.md", "session.share": "docs/security.md",
		"session.unshare": "docs/security.md", "audit.list": "docs/security.md",
		"rate_limited": "docs/security.md", "lease_lost": "docs/scale-out.md",
		// Issue 28: steering (snowpea 1.7's session.steer) and the editable queue.
		"session.steer": "docs/compat.md", "session.queue.list": "docs/protocol.md",
		"session.queue.remove": "docs/protocol.md", "session.queue.clear": "docs/protocol.md",
		"turn.steered": "docs/protocol.md", "turn.rollback": "docs/protocol.md",
		"operation_outcome_unknown": "docs/protocol.md",
		// Issue 30: retries of a model call, told to clients.
		"provider.retry": "docs/protocol.md",
		// Issue 32 item 9: snowpea 1.7's methods.
		"session.setModel": "docs/compat.md", "session.setEffort": "docs/compat.md",
		"session.rename": "docs/compat.md", "session.notice": "docs/compat.md",
		"session.artifacts": "docs/compat.md", "file.complete": "docs/compat.md",
		"session.toolContent": "docs/compat.md", "model.changed": "docs/compat.md", "session.setBrowserProvider": "docs/compat.md",
		"memory.list": "docs/compat.md", "memory.delete": "docs/compat.md",
		"skill.read": "docs/compat.md", "skill.write": "docs/compat.md", "skill.create": "docs/compat.md",
		"provider.models": "docs/compat.md", "provider.remove": "docs/compat.md", "provider.test": "docs/compat.md",
		"mcp.add": "docs/compat.md", "mcp.remove": "docs/compat.md", "mcp.update": "docs/compat.md",
		"mcp.test": "docs/compat.md", "mcp.reload": "docs/compat.md",
		"settings.get": "docs/compat.md", "settings.set": "docs/compat.md", "system.reloadSettings": "docs/compat.md",
		"settings.changed": "docs/compat.md",
		"question.list":    "docs/compat.md", "question.respond": "docs/compat.md", "question.request": "docs/compat.md",
		"question.pending": "docs/compat.md", "question.resolved": "docs/compat.md",
		// Issue 31: tools a client lends (snowpea 1.7's tool.register).
		"tool.register": "README.md", "tool.unregister": "README.md",
		// Issue 30: snowpea 1.7's usage totals.
		"usage.summary": "docs/compat.md", "session.usage": "docs/compat.md",
		// Issue 30: budgets that pause a turn.
		"session.setBudget": "docs/budgets.md", "turn.paused": "docs/budgets.md", "turn.resumed": "docs/budgets.md",
		"principal.setBudget": "docs/budgets.md",
		// Issue 29: checkpoints of the workdir (snowpea 1.7's checkpoint.*).
		"checkpoint.list": "docs/workspaces.md", "checkpoint.diff": "docs/workspaces.md",
		"checkpoint.restore": "docs/workspaces.md", "checkpoint.delete": "docs/workspaces.md",
		"checkpoint": "docs/workspaces.md", "workspace_changed": "docs/workspaces.md",
		"checkpoint_quota_exceeded": "docs/workspaces.md", "workdir_missing": "docs/workspaces.md",
		// Issue 29: archived sessions (export and import are REST and gRPC
		// streams, in the same document).
		"session.archive": "docs/export.md", "session.unarchive": "docs/export.md", "session_archived": "docs/export.md",
		// Issue 29: fork and rewind.
		"session.fork": "docs/workspaces.md", "session.rewind": "docs/workspaces.md", "session.rewound": "docs/workspaces.md",
		// Issue 29: retention policies.
		"session.prune": "docs/export.md",
	}
	for name, file := range additions {
		text, err := os.ReadFile(filepath.Join("..", file))
		if err != nil || !strings.Contains(string(text), "`"+name+"`") {
			t.Errorf("Trellis's addition %s is not documented in %s (%v)", name, file, err)
		}
	}
	added := func(got []string) []string {
		var out []string
		for _, g := range got {
			if _, ok := additions[g]; !ok {
				out = append(out, g)
			}
		}
		return out
	}
	// tool.call is also the server → client request of a lent tool
	// (README.md, "Lend your own tools to a session"), besides the event.
	if text, err := os.ReadFile(filepath.Join("..", "README.md")); err != nil || !strings.Contains(string(text), "`tool.call`") {
		t.Errorf("the tool.call request is not documented in README.md (%v)", err)
	}
	check("methods", added(keys(doc.Methods)), append(spec.methods, "tool.call"))
	check("notifications", added(keys(doc.Notifications)), spec.notifications)
	check("event kinds", added(keys(doc.SessionEventKinds)), append(spec.events, "step.started", "step.done"))
	var codes []string
	for _, c := range doc.ErrorCodes {
		codes = append(codes, c.Code)
		if want := spec.numeric[c.Code]; want != 0 && want != c.Numeric {
			t.Errorf("error %s numeric %d, PROTOCOL.md says %d", c.Code, c.Numeric, want)
		}
	}
	check("error codes", added(codes), keysInt(spec.numeric))
}

type protocolLists struct {
	methods, notifications, events []string
	numeric                        map[string]int
}

// specLists reads the lists from ../shared/spec/PROTOCOL.md.
func specLists(t *testing.T) protocolLists {
	t.Helper()
	var b []byte
	for _, p := range []string{"../../shared/spec/PROTOCOL.md", "../shared/spec/PROTOCOL.md"} {
		if data, err := os.ReadFile(p); err == nil {
			b = data
			break
		}
	}
	if b == nil {
		t.Skip("PROTOCOL.md not found beside the repository (../shared/spec)")
	}
	text := string(b)
	section := func(start, end string) string {
		i := strings.Index(text, start)
		j := strings.Index(text[i:], end)
		return text[i : i+j]
	}
	var l protocolLists
	for _, m := range regexp.MustCompile("(?m)^- `([a-z]+(?:\\.[a-zA-Z]+)+)[`(]").FindAllStringSubmatch(section("## 4. Methods", "## 5."), -1) {
		l.methods = append(l.methods, m[1])
	}
	// Some methods follow another on the same line: `job.runNow({jobId})`.
	for _, m := range regexp.MustCompile("`([a-z]+(?:\\.[a-zA-Z]+)+)\\(").FindAllStringSubmatch(section("## 4. Methods", "## 5."), -1) {
		if !contains(l.methods, m[1]) {
			l.methods = append(l.methods, m[1])
		}
	}
	l.methods = append(l.methods, "approval.request") // §5
	for _, m := range regexp.MustCompile("`([a-z]+\\.[a-z]+) \\{").FindAllStringSubmatch(section("## 6. Notifications", "## 7."), -1) {
		l.notifications = append(l.notifications, m[1])
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z.]+)` \\|").FindAllStringSubmatch(section("## 7. Session events", "Turn order"), -1) {
		l.events = append(l.events, m[1])
	}
	l.numeric = map[string]int{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (-\\d+) \\|").FindAllStringSubmatch(section("### Errors", "## 3."), -1) {
		var n int
		fmt.Sscan(m[2], &n)
		l.numeric[m[1]] = n
	}
	if len(l.methods) < 40 || len(l.events) < 20 || len(l.numeric) < 15 || len(l.notifications) < 5 {
		t.Fatalf("PROTOCOL.md parse looks wrong: %d methods, %d events, %d errors, %d notifications",
			len(l.methods), len(l.events), len(l.numeric), len(l.notifications))
	}
	return l
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func keysInt(m map[string]int) []string { return keys(m) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestOneDaemonPerHome: a second daemon on the same home is refused while
// the first runs, and starts once it has stopped.
func TestOneDaemonPerHome(t *testing.T) {
	d := startDaemon(t)
	if _, err := daemon.Start(context.Background(), daemon.Config{Home: d.Home()}); err == nil || !strings.Contains(err.Error(), "already runs") || !strings.Contains(err.Error(), "--store postgres://") {
		t.Fatalf("second daemon on one home: %v", err)
	}
	d.Stop()
	d2, err := daemon.Start(context.Background(), daemon.Config{Home: d.Home()})
	if err != nil {
		t.Fatalf("start after stop: %v", err)
	}
	d2.Stop()
}
