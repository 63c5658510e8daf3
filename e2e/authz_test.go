package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/facade/methods"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/rpc"
)

// makePrincipal creates a principal with role through c (an admin) and
// returns its id and a new key.
func makePrincipal(t testing.TB, c client, name, role string) (id, key string) {
	t.Helper()
	var p struct {
		Principal struct {
			PrincipalID string `json:"principalId"`
		} `json:"principal"`
	}
	if err := c.Call(context.Background(), "principal.create", map[string]any{"name": name, "role": role}, &p); err != nil {
		t.Fatalf("principal.create %s: %v", name, err)
	}
	var k struct {
		Secret string `json:"secret"`
	}
	if err := c.Call(context.Background(), "key.create", map[string]any{"principalId": p.Principal.PrincipalID, "name": name + "'s laptop"}, &k); err != nil {
		t.Fatalf("key.create %s: %v", name, err)
	}
	return p.Principal.PrincipalID, k.Secret
}

// unattendedSession creates a session as key's holder on a connection it
// then closes: the session's approvals go to the unattended queue.
func unattendedSession(t testing.TB, d *daemon.Daemon, key string) string {
	t.Helper()
	origin, _ := helloWSKey(t, d, key)
	id := createSession(t, origin, nil)
	origin.Close()
	return id
}

// helloWSKey connects and says hello with token (a key), returning the
// hello result's principal role.
func helloWSKey(t testing.TB, d *daemon.Daemon, token string) (*wsClient, string) {
	t.Helper()
	c := dialWS(t, d)
	var r struct {
		Principal struct {
			Role string `json:"role"`
		} `json:"principal"`
	}
	if err := c.Call(context.Background(), "system.hello", map[string]any{
		"token": token, "clientVersion": "test", "protocolVersion": "1.0.0",
	}, &r); err != nil {
		t.Fatalf("hello: %v", err)
	}
	return c, r.Principal.Role
}

// restAs calls a REST route with params as token's holder and returns the
// HTTP status and the error's data.code ("" on success).
func restAs(t testing.TB, d *daemon.Daemon, route restRoute, token string, params map[string]any) (int, string) {
	t.Helper()
	u := fmt.Sprintf("http://127.0.0.1:%d%s", d.HTTPPort(), route.Path)
	var body io.Reader
	if route.Verb == "GET" {
		q := url.Values{}
		for k, v := range params {
			q.Set(k, fmt.Sprint(v))
		}
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
	} else {
		b, _ := json.Marshal(params)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(route.Verb, u, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, ""
	}
	var e struct {
		Data struct {
			Code string `json:"code"`
		} `json:"data"`
	}
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatalf("REST %s %s: %d %s", route.Verb, route.Path, resp.StatusCode, out)
	}
	return resp.StatusCode, e.Data.Code
}

func codeOf(e *errcode.Error) string {
	if e == nil {
		return ""
	}
	return e.StringCode()
}

// TestRolesMatrix runs every documented method as each role over
// WebSocket, gRPC and REST: a role below the method's least role gets
// forbidden (HTTP 403), a role at or above it never does, and the three
// transports give the same answer. A method without a row in the
// authorization table fails the test.
func TestRolesMatrix(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	routes := restRoutes(t)
	roles := []string{"admin", "operator", "member", "approver", "viewer"}
	keys := map[string]string{}
	for _, role := range roles {
		_, keys[role] = makePrincipal(t, admin, "matrix-"+role, role)
	}
	ws := map[string]*wsClient{}
	gc := map[string]*grpcClient{}
	for _, role := range roles {
		var got string
		ws[role], got = helloWSKey(t, d, keys[role])
		if got != role {
			t.Fatalf("hello with %s's key answered role %q", role, got)
		}
		gc[role] = dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), keys[role])
	}

	names := methods.Names()
	sort.Strings(names)
	for _, name := range names {
		minRole, _, ok := rpc.Access(methods.Lookup(name).FullMethod)
		if !ok {
			t.Errorf("%s has no row in the authorization table: give it an (access) option", name)
			continue
		}
		for _, role := range roles {
			allowed := auth.Allows(role, minRole)
			if name == "system.shutdown" && allowed {
				continue // it would end the test's daemon
			}
			t.Run(name+"/"+role, func(t *testing.T) {
				// Empty params: an allowed call fails on its params or
				// does something harmless (lists, a session in the
				// default workdir); only the authorization is checked.
				params := map[string]any{}
				answers := map[string]string{
					"ws":   codeOf(ws[role].Call(context.Background(), name, params, nil)),
					"grpc": codeOf(gc[role].Call(context.Background(), name, params, nil)),
				}
				if route, ok := routes[name]; ok {
					status, code := restAs(t, d, route, keys[role], params)
					answers["rest"] = code
					if code == "forbidden" && status != http.StatusForbidden {
						t.Errorf("REST answered forbidden with HTTP %d, want 403", status)
					}
				} else {
					t.Errorf("%s has no REST route", name)
				}
				for tr, code := range answers {
					switch {
					case !allowed && code != "forbidden":
						t.Errorf("%s as %s (least role %s) over %s answered %q, want forbidden", name, role, minRole, tr, code)
					case allowed && (code == "forbidden" || code == "unauthorized"):
						t.Errorf("%s as %s (least role %s) over %s answered %s", name, role, minRole, tr, code)
					}
				}
				if answers["ws"] != answers["grpc"] || answers["ws"] != answers["rest"] {
					t.Errorf("%s as %s: the transports differ: %v", name, role, answers)
				}
			})
		}
	}

	// A few rows spelled out, so that a wrong table cannot pass by
	// agreeing with itself.
	// A real session: the WebSocket facade subscribes a prompting
	// connection to the session before the call, which answers not_found
	// for a session that does not exist whatever the role.
	real := createSession(t, admin, nil)
	session := map[string]any{"sessionId": "s-none"}
	for _, c := range []struct {
		role, method string
		params       map[string]any
		want         string
	}{
		{"viewer", "session.prompt", map[string]any{"sessionId": real, "text": "x"}, "forbidden"},
		{"viewer", "session.interrupt", map[string]any{"sessionId": real}, "forbidden"},
		{"viewer", "session.archive", map[string]any{"sessionId": real}, "forbidden"},
		{"member", "session.prune", map[string]any{"keepLatest": 1, "dryRun": true}, "forbidden"},
		{"viewer", "approval.respond", map[string]any{"requestId": "r-none", "decision": "allow"}, "forbidden"},
		{"approver", "session.setMode", map[string]any{"sessionId": real, "mode": "plan"}, "forbidden"},
		{"member", "provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{}}, "forbidden"},
		{"operator", "principal.create", map[string]any{"name": "x", "role": "viewer"}, "forbidden"},
		{"operator", "system.shutdown", map[string]any{}, "forbidden"},
		{"viewer", "session.resume", session, "not_found"},
		{"approver", "approval.respond", map[string]any{"requestId": "r-none", "decision": "allow"}, "not_found"},
		{"member", "session.prompt", map[string]any{"sessionId": "s-none", "text": "x"}, "not_found"},
		{"approver", "job.list", map[string]any{}, "forbidden"},
		{"member", "job.cancel", map[string]any{"jobId": "j-none"}, "not_found"},
		{"member", "job.schedule", map[string]any{"spec": "@daily", "task": "x", "channel": "b-any"}, "forbidden"},
		{"member", "gateway.list", map[string]any{}, "forbidden"},
	} {
		if got := codeOf(ws[c.role].Call(context.Background(), c.method, c.params, nil)); got != c.want {
			t.Errorf("%s as %s over WebSocket: %q, want %q", c.method, c.role, got, c.want)
		}
		if got := codeOf(gc[c.role].Call(context.Background(), c.method, c.params, nil)); got != c.want {
			t.Errorf("%s as %s over gRPC: %q, want %q", c.method, c.role, got, c.want)
		}
	}
}

// TestRoleStreams: gRPC streams are in the table too.
func TestRoleStreams(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	_, viewerKey := makePrincipal(t, admin, "stream-viewer", "viewer")
	gc := dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), viewerKey)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+viewerKey)
	stream, err := trellisv1.NewApprovalServiceClient(gc.conn).WatchQueue(ctx, &trellisv1.WatchQueueRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if st, _ := status.FromError(err); st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "approver") {
		t.Fatalf("WatchQueue as viewer: %v, want PermissionDenied naming approver", err)
	}
}

// TestSubscribeSessionsChecksEachWatch: a member's SubscribeSessions
// stream watches the session it owns (its events, then caught_up) and a
// watch of another member's session ends not_found, while the stream goes
// on (the stream was operator-only before watches were checked).
func TestSubscribeSessionsChecksEachWatch(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	_, annKey := makePrincipal(t, admin, "ann", "member")
	_, bobKey := makePrincipal(t, admin, "bob", "member")
	addr := fmt.Sprintf("127.0.0.1:%d", d.GRPCPort())
	ann, bob := dialGRPCAddr(t, addr, annKey), dialGRPCAddr(t, addr, bobKey)
	annSession, bobSession := createSession(t, ann, nil), createSession(t, bob, nil)

	ctx, cancel := context.WithTimeout(ann.outgoing(context.Background()), 30*time.Second)
	defer cancel()
	stream, err := trellisv1.NewSessionServiceClient(ann.conn).SubscribeSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	watch := func(id uint64, session string) {
		t.Helper()
		if err := stream.Send(&trellisv1.SubscribeSessionsRequest{Op: &trellisv1.SubscribeSessionsRequest_Watch{
			Watch: &trellisv1.WatchSession{WatchId: id, SessionId: session}}}); err != nil {
			t.Fatal(err)
		}
	}
	watch(1, bobSession) // refused first: the stream must go on after it
	watch(2, annSession)
	var endedBob, caughtUpAnn bool
	for !endedBob || !caughtUpAnn {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("the stream ended: %v", err)
		}
		switch {
		case r.GetWatchId() == 1 && r.GetEnded() != nil:
			if r.GetEnded().GetCode() != "not_found" {
				t.Fatalf("watch of bob's session ended %v, want not_found", r.GetEnded())
			}
			endedBob = true
		case r.GetWatchId() == 1:
			t.Fatalf("ann's watch of bob's session got %v", r)
		case r.GetWatchId() == 2 && r.GetEnded() != nil:
			t.Fatalf("ann's watch of her own session ended: %v", r.GetEnded())
		case r.GetWatchId() == 2 && r.GetCaughtUp() != nil:
			caughtUpAnn = true
		}
	}
}

// TestKeysLifecycle: keys work on every transport until revoked; a revoked,
// unknown or malformed key is refused (unauthorized) on its next call, on
// an open WebSocket too; bad input to the admin methods changes nothing.
func TestKeysLifecycle(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	id, key := makePrincipal(t, admin, "ann", "member")

	ws, role := helloWSKey(t, d, key)
	if role != "member" {
		t.Fatalf("role %q", role)
	}
	gc := dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), key)
	listRoute := restRoute{Verb: "GET", Path: "/v1/session/list"}
	if err := ws.Call(context.Background(), "session.list", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := gc.Call(context.Background(), "session.list", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	if status, code := restAs(t, d, listRoute, key, map[string]any{}); status != 200 {
		t.Fatalf("REST with a key: %d %s", status, code)
	}

	// key.list shows the key without its secret.
	var kl struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := admin.Call(context.Background(), "key.list", map[string]any{"principalId": id}, &kl); err != nil {
		t.Fatal(err)
	}
	if len(kl.Keys) != 1 {
		t.Fatalf("key.list: %v", kl.Keys)
	}
	b, _ := json.Marshal(kl)
	if strings.Contains(string(b), key) || !strings.HasPrefix(key, kl.Keys[0]["prefix"].(string)) {
		t.Fatalf("key.list shows %s for key %s", b, key)
	}
	if err := admin.Call(context.Background(), "key.revoke", map[string]any{"keyId": kl.Keys[0]["keyId"]}, nil); err != nil {
		t.Fatal(err)
	}
	// Refused on the next call, on every transport, the open WebSocket included.
	if got := codeOf(ws.Call(context.Background(), "session.list", map[string]any{}, nil)); got != "unauthorized" {
		t.Errorf("revoked key on its open WebSocket: %q", got)
	}
	// ... and that WebSocket is then closed by the daemon.
	select {
	case <-ws.conn.Done():
	case <-time.After(30 * time.Second):
		t.Errorf("the WebSocket of a revoked key is still open 30 s after its refused call")
	}
	if got := codeOf(gc.Call(context.Background(), "session.list", map[string]any{}, nil)); got != "unauthorized" {
		t.Errorf("revoked key over gRPC: %q", got)
	}
	if status, code := restAs(t, d, listRoute, key, map[string]any{}); status != 401 || code != "unauthorized" {
		t.Errorf("revoked key over REST: %d %q", status, code)
	}
	hello := func(token string) string {
		return codeOf(dialWS(t, d).Call(context.Background(), "system.hello", map[string]any{"token": token, "clientVersion": "t", "protocolVersion": "1.0.0"}, nil))
	}
	for name, tok := range map[string]string{"revoked": key, "malformed": "trk_nope", "unknown": auth.KeyPrefix + strings.Repeat("A", 43)} {
		if got := hello(tok); got != "unauthorized" {
			t.Errorf("hello with a %s key: %q", name, got)
		}
	}

	// Bad input: each a documented error, nothing half-written.
	before := principalNames(t, admin)
	for _, c := range []struct {
		method string
		params map[string]any
		want   string
	}{
		{"principal.create", map[string]any{"name": "bob", "role": "superuser"}, "invalid_params"},
		{"principal.create", map[string]any{"name": " ", "role": "viewer"}, "invalid_params"},
		{"principal.create", map[string]any{"name": "ann", "role": "viewer"}, "invalid_params"},
		{"principal.update", map[string]any{"principalId": id, "role": "root"}, "invalid_params"},
		{"principal.update", map[string]any{"principalId": "p-none", "role": "viewer"}, "not_found"},
		{"principal.update", map[string]any{"principalId": auth.BuiltinID, "role": "viewer"}, "invalid_params"},
		{"principal.delete", map[string]any{"principalId": "p-none"}, "not_found"},
		{"principal.delete", map[string]any{"principalId": auth.BuiltinID}, "invalid_params"},
		{"key.create", map[string]any{"principalId": "p-none"}, "not_found"},
		{"key.create", map[string]any{"principalId": id, "expiresAt": "2001-01-01T00:00:00Z"}, "invalid_params"},
		{"key.create", map[string]any{"principalId": id, "expiresAt": "tomorrow"}, "invalid_params"},
		{"key.revoke", map[string]any{"keyId": "k-none"}, "not_found"},
		{"key.list", map[string]any{"principalId": "p-none"}, "not_found"},
	} {
		if got := codeOf(admin.Call(context.Background(), c.method, c.params, nil)); got != c.want {
			t.Errorf("%s %v: %q, want %q", c.method, c.params, got, c.want)
		}
	}
	if after := principalNames(t, admin); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("refused calls changed the principals: %v → %v", before, after)
	}
	var keysAfter struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := admin.Call(context.Background(), "key.list", map[string]any{}, &keysAfter); err != nil || len(keysAfter.Keys) != 1 {
		t.Errorf("refused key.create calls left keys: %v %v", keysAfter.Keys, err)
	}

	// The last admin principal can be neither demoted nor deleted (the
	// built-in admin, the daemon token, is not a stored principal).
	bossID, bossKey := makePrincipal(t, admin, "boss", "admin")
	boss, _ := helloWSKey(t, d, bossKey)
	var e *errcode.Error
	if e = boss.Call(context.Background(), "principal.delete", map[string]any{"principalId": bossID}, nil); codeOf(e) != "invalid_params" || e.Data["reason"] != "last_admin" {
		t.Errorf("deleting the last admin: %v (data %v)", e, e)
	}
	if e = admin.Call(context.Background(), "principal.update", map[string]any{"principalId": bossID, "role": "member"}, nil); codeOf(e) != "invalid_params" {
		t.Errorf("demoting the last admin: %v", e)
	}
	// Deleting a principal ends its keys.
	if err := boss.Call(context.Background(), "principal.delete", map[string]any{"principalId": id}, nil); err != nil {
		t.Fatal(err)
	}
	if err := boss.Call(context.Background(), "principal.list", map[string]any{}, nil); err != nil {
		t.Fatalf("the last admin's key after deleting another principal: %v", err)
	}
}

func principalNames(t testing.TB, c client) []string {
	t.Helper()
	var r struct {
		Principals []struct {
			Name    string `json:"name"`
			Role    string `json:"role"`
			Builtin bool   `json:"builtin"`
		} `json:"principals"`
	}
	if err := c.Call(context.Background(), "principal.list", map[string]any{}, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Principals) == 0 || !r.Principals[0].Builtin || r.Principals[0].Role != "admin" {
		t.Fatalf("principal.list does not start with the built-in admin: %+v", r.Principals)
	}
	var out []string
	for _, p := range r.Principals {
		out = append(out, p.Name+":"+p.Role)
	}
	return out
}

func listedSessions(t testing.TB, c client) []string {
	t.Helper()
	var r struct {
		Sessions []struct {
			SessionID string `json:"sessionId"`
		} `json:"sessions"`
	}
	if err := c.Call(context.Background(), "session.list", map[string]any{"includeClosed": true}, &r); err != nil {
		t.Fatalf("session.list: %v", err)
	}
	var out []string
	for _, s := range r.Sessions {
		out = append(out, s.SessionID)
	}
	sort.Strings(out)
	return out
}

// TestSessionOwnership: a session belongs to the principal that created
// it. Another member neither lists nor resumes nor prompts it (not_found:
// no existence leak) until it is shared; a viewer grant lets it watch but
// not act; a controller grant lets it act; operators read every session but
// act on none of them; admins do everything. WebSocket and gRPC agree.
func TestSessionOwnership(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	_, annKey := makePrincipal(t, admin, "ann", "member")
	bobID, bobKey := makePrincipal(t, admin, "bob", "member")
	_, opKey := makePrincipal(t, admin, "olga", "operator")
	vicID, vicKey := makePrincipal(t, admin, "vic", "viewer")
	ann, _ := helloWSKey(t, d, annKey)
	bob, _ := helloWSKey(t, d, bobKey)
	op, _ := helloWSKey(t, d, opKey)
	vic, _ := helloWSKey(t, d, vicKey)
	bobGRPC := dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), bobKey)

	annSession := createSession(t, ann, nil)
	promptComplete(t, ann, annSession, "hello")
	bobSession := createSession(t, bob, nil)
	daemonSession := createSession(t, admin, nil)

	if got := listedSessions(t, ann); strings.Join(got, ",") != annSession {
		t.Errorf("ann lists %v, want only her session", got)
	}
	if got := listedSessions(t, bob); strings.Join(got, ",") != bobSession {
		t.Errorf("bob lists %v, want only his session", got)
	}
	if got := listedSessions(t, vic); len(got) != 0 {
		t.Errorf("vic lists %v before any share", got)
	}
	for _, c := range []client{op, admin} {
		if got := listedSessions(t, c); len(got) != 3 {
			t.Errorf("an operator or admin lists %v, want all 3", got)
		}
	}

	resume := map[string]any{"sessionId": annSession}
	prompt := map[string]any{"sessionId": annSession, "text": "hello"}
	setMode := map[string]any{"sessionId": annSession, "mode": "plan"}
	expect := func(who string, c client, method string, params map[string]any, want string) {
		t.Helper()
		if got := codeOf(c.Call(context.Background(), method, params, nil)); got != want {
			t.Errorf("%s %s %v: %q, want %q", who, method, params, got, want)
		}
	}
	// Not shared: another member cannot tell the session exists.
	for name, c := range map[string]client{"bob/ws": bob, "bob/grpc": bobGRPC} {
		expect(name, c, "session.resume", resume, "not_found")
		expect(name, c, "session.prompt", prompt, "not_found")
		expect(name, c, "session.setMode", setMode, "not_found")
	}
	expect("vic", vic, "session.resume", resume, "not_found")
	// The gRPC event stream is checked on its request too.
	subscribe := func(key string) codes.Code {
		t.Helper()
		gc := dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), key)
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key), 30*time.Second)
		defer cancel()
		stream, err := trellisv1.NewSessionServiceClient(gc.conn).Subscribe(ctx, &trellisv1.SubscribeRequest{SessionId: annSession})
		if err == nil {
			_, err = stream.Recv()
		}
		return status.Code(err)
	}
	if c := subscribe(vicKey); c != codes.NotFound {
		t.Errorf("vic subscribes to ann's session before the share: %v, want NotFound", c)
	}
	if c := subscribe(annKey); c != codes.OK {
		t.Errorf("ann subscribes to her session: %v", c)
	}
	// Operators read every session, and act on none but their own.
	expect("olga", op, "session.resume", resume, "")
	expect("olga", op, "session.setMode", setMode, "forbidden")
	// Sharing: the owner or an admin; not to oneself, not an unknown principal or role.
	expect("bob", bob, "session.share", map[string]any{"sessionId": annSession, "principalId": bobID, "role": "viewer"}, "not_found")
	expect("ann", ann, "session.share", map[string]any{"sessionId": annSession, "principalId": "p-none", "role": "viewer"}, "not_found")
	expect("ann", ann, "session.share", map[string]any{"sessionId": annSession, "principalId": bobID, "role": "owner"}, "invalid_params")
	annID := ""
	{
		var r struct {
			Principals []struct{ PrincipalID, Name string } `json:"principals"`
		}
		if err := admin.Call(context.Background(), "principal.list", map[string]any{}, &r); err != nil {
			t.Fatal(err)
		}
		for _, p := range r.Principals {
			if p.Name == "ann" {
				annID = p.PrincipalID
			}
		}
	}
	expect("ann", ann, "session.share", map[string]any{"sessionId": annSession, "principalId": annID, "role": "viewer"}, "invalid_params")
	expect("ann", ann, "session.share", map[string]any{"sessionId": annSession, "principalId": bobID, "role": "viewer"}, "")
	expect("ann", ann, "session.share", map[string]any{"sessionId": annSession, "principalId": vicID, "role": "viewer"}, "")

	// A viewer grant: list, resume and watch; prompt and mode changes refused.
	if got := listedSessions(t, bob); len(got) != 2 {
		t.Errorf("bob lists %v after the share, want 2", got)
	}
	for name, c := range map[string]client{"bob/ws": bob, "bob/grpc": bobGRPC, "vic": vic} {
		expect(name, c, "session.resume", resume, "")
		expect(name, c, "session.prompt", prompt, "forbidden")
		expect(name, c, "session.setMode", setMode, "forbidden")
	}
	// A grantee cannot pass the session on.
	expect("bob", bob, "session.share", map[string]any{"sessionId": annSession, "principalId": vicID, "role": "controller"}, "forbidden")

	// A controller grant: bob acts on the session; vic (a viewer by role) cannot even with one.
	expect("admin", admin, "session.share", map[string]any{"sessionId": annSession, "principalId": bobID, "role": "controller"}, "")
	expect("ann", ann, "session.share", map[string]any{"sessionId": annSession, "principalId": vicID, "role": "controller"}, "")
	expect("bob", bob, "session.setMode", setMode, "")
	expect("bob/grpc", bobGRPC, "session.setMode", map[string]any{"sessionId": annSession, "mode": "accept"}, "")
	expect("vic", vic, "session.setMode", setMode, "forbidden")

	// Unshare: bob is back to not_found.
	expect("ann", ann, "session.unshare", map[string]any{"sessionId": annSession, "principalId": bobID}, "")
	expect("bob", bob, "session.resume", resume, "not_found")
	expect("ann", ann, "session.unshare", map[string]any{"sessionId": annSession, "principalId": bobID}, "not_found")
	// The admin acts on every session, the daemon token's own included.
	expect("admin", admin, "session.setMode", setMode, "")
	expect("ann", ann, "session.resume", map[string]any{"sessionId": daemonSession}, "not_found")
}

// TestSubagentSessionsFollowTheirParentsOwner: the sessions of a team a
// member starts belong to the member, who lists them; another member does not.
func TestSubagentSessionsFollowTheirParentsOwner(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	_, annKey := makePrincipal(t, admin, "ann", "member")
	_, bobKey := makePrincipal(t, admin, "bob", "member")
	ann, _ := helloWSKey(t, d, annKey)
	bob, _ := helloWSKey(t, d, bobKey)
	parent := createSession(t, ann, map[string]any{"mode": "auto"})
	if err := ann.Call(context.Background(), "team.start", map[string]any{"sessionId": parent, "n": 2, "task": "say hello"}, nil); err != nil {
		t.Fatalf("team.start: %v", err)
	}
	collect(t, ann.Events(parent), "team.task.update", 3) // queued, running, done
	var r struct {
		Sessions []struct {
			SessionID       string  `json:"sessionId"`
			ParentSessionID *string `json:"parentSessionId"`
		} `json:"sessions"`
	}
	if err := ann.Call(context.Background(), "session.list", map[string]any{"includeClosed": true}, &r); err != nil {
		t.Fatal(err)
	}
	children := 0
	for _, s := range r.Sessions {
		if s.ParentSessionID != nil && *s.ParentSessionID == parent {
			children++
		}
	}
	if children == 0 {
		t.Fatalf("ann does not list her team's sessions: %+v", r.Sessions)
	}
	if got := listedSessions(t, bob); len(got) != 0 {
		t.Fatalf("bob lists %v", got)
	}
}

// TestSecurityAuditLog: calls of audited methods are recorded, allowed and
// refused, with their principal and their request's scalar fields (never a
// provider's configuration); audit.list filters and pages, for admins only.
func TestSecurityAuditLog(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	annID, annKey := makePrincipal(t, admin, "ann", "member")
	ann, _ := helloWSKey(t, d, annKey)
	ctx := context.Background()
	if got := codeOf(ann.Call(ctx, "principal.create", map[string]any{"name": "mallory", "role": "admin"}, nil)); got != "forbidden" {
		t.Fatalf("member principal.create: %q", got)
	}
	const secret = "sk-audit-secret-0123456789"
	admin.Call(ctx, "provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{"api_key": secret}}, nil)
	bad := dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), auth.KeyPrefix+strings.Repeat("B", 43))
	if got := codeOf(bad.Call(ctx, "key.revoke", map[string]any{"keyId": "k-x"}, nil)); got != "unauthorized" {
		t.Fatalf("unknown key: %q", got)
	}
	if got := codeOf(ann.Call(ctx, "audit.list", map[string]any{}, nil)); got != "forbidden" {
		t.Fatalf("member audit.list: %q", got)
	}

	type event struct {
		ID            int64          `json:"id"`
		PrincipalID   string         `json:"principalId"`
		PrincipalName string         `json:"principalName"`
		Method        string         `json:"method"`
		Request       map[string]any `json:"request"`
		Outcome       string         `json:"outcome"`
	}
	var r struct {
		Events       []event `json:"events"`
		NextBeforeID *int64  `json:"nextBeforeId"`
	}
	if err := admin.Call(ctx, "audit.list", map[string]any{}, &r); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range r.Events {
		got = append(got, e.Method+":"+e.Outcome)
	}
	// Newest first: the refused key.revoke, provider.configure (whatever
	// its outcome), ann's refused principal.create, then makePrincipal's
	// key.create and principal.create.
	if len(r.Events) != 5 || r.Events[0].Method != "key.revoke" || r.Events[0].Outcome != "unauthorized" || r.Events[0].PrincipalID != "" ||
		r.Events[1].Method != "provider.configure" || r.Events[2].Method != "principal.create" || r.Events[2].Outcome != "forbidden" ||
		r.Events[2].PrincipalID != annID || r.Events[2].Request["name"] != "mallory" || r.Events[2].Request["role"] != "admin" ||
		r.Events[3].Method != "key.create" || r.Events[3].Outcome != "ok" || r.Events[3].PrincipalName != "admin (daemon token)" ||
		r.Events[4].Method != "principal.create" || r.NextBeforeID != nil {
		t.Fatalf("audit.list: %v\n%+v", got, r.Events)
	}
	b, _ := json.Marshal(r)
	if strings.Contains(string(b), secret) {
		t.Fatalf("the audit log holds a provider secret: %s", b)
	}
	// Filters and pages.
	var page struct {
		Events       []event `json:"events"`
		NextBeforeID *int64  `json:"nextBeforeId"`
	}
	if err := admin.Call(ctx, "audit.list", map[string]any{"limit": 2}, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 2 || page.NextBeforeID == nil || *page.NextBeforeID != r.Events[1].ID {
		t.Fatalf("first page: %+v next %v", page.Events, page.NextBeforeID)
	}
	if err := admin.Call(ctx, "audit.list", map[string]any{"limit": 2, "beforeId": *page.NextBeforeID}, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 2 || page.Events[0].ID != r.Events[2].ID {
		t.Fatalf("second page: %+v", page.Events)
	}
	if err := admin.Call(ctx, "audit.list", map[string]any{"principalId": annID}, &page); err != nil || len(page.Events) != 1 {
		t.Fatalf("ann's events: %+v %v", page.Events, err)
	}
	if err := admin.Call(ctx, "audit.list", map[string]any{"method": "key.create"}, &page); err != nil || len(page.Events) != 1 {
		t.Fatalf("key.create events: %+v %v", page.Events, err)
	}
	if got := codeOf(admin.Call(ctx, "audit.list", map[string]any{"limit": 0}, nil)); got != "invalid_params" {
		t.Fatalf("limit 0: %q", got)
	}
}

// TestKeyRateLimit: a key made with ratePerSecond is told its rate in
// hello; past it calls answer rate_limited with data.retryAfterMs (gRPC
// RESOURCE_EXHAUSTED, HTTP 429); other keys and the token are not limited.
func TestKeyRateLimit(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	ctx := context.Background()
	id, _ := makePrincipal(t, admin, "bot", "viewer")
	var k struct {
		Secret string `json:"secret"`
		Key    struct {
			RatePerSecond *int `json:"ratePerSecond"`
		} `json:"key"`
	}
	if got := codeOf(admin.Call(ctx, "key.create", map[string]any{"principalId": id, "ratePerSecond": 0}, nil)); got != "invalid_params" {
		t.Fatalf("rate 0: %q", got)
	}
	if err := admin.Call(ctx, "key.create", map[string]any{"principalId": id, "ratePerSecond": 2}, &k); err != nil {
		t.Fatal(err)
	}
	if k.Key.RatePerSecond == nil || *k.Key.RatePerSecond != 2 {
		t.Fatalf("key.create answered rate %v", k.Key.RatePerSecond)
	}
	c := dialWS(t, d)
	var hello struct {
		Limits struct {
			KeyRatePerSecond int `json:"keyRatePerSecond"`
		} `json:"limits"`
	}
	if err := c.Call(ctx, "system.hello", map[string]any{"token": k.Secret, "clientVersion": "t", "protocolVersion": "1.0.0"}, &hello); err != nil {
		t.Fatal(err)
	}
	if hello.Limits.KeyRatePerSecond != 2 {
		t.Fatalf("hello limits.keyRatePerSecond = %d, want 2", hello.Limits.KeyRatePerSecond)
	}
	// A bucket holds two calls: the third of a quick burst is refused.
	var refused *errcode.Error
	for range 10 {
		if e := c.Call(ctx, "session.list", map[string]any{}, nil); e != nil {
			refused = e
			break
		}
	}
	if codeOf(refused) != "rate_limited" || refused.Data["retryAfterMs"] == nil {
		t.Fatalf("10 quick calls at 2 a second: %v", refused)
	}
	status, code := restAs(t, d, restRoute{Verb: "GET", Path: "/v1/session/list"}, k.Secret, map[string]any{})
	if status != http.StatusTooManyRequests || code != "rate_limited" {
		// The bucket may have refilled a token between the calls: try a few.
		for range 5 {
			if status, code = restAs(t, d, restRoute{Verb: "GET", Path: "/v1/session/list"}, k.Secret, map[string]any{}); status == http.StatusTooManyRequests {
				break
			}
		}
		if status != http.StatusTooManyRequests || code != "rate_limited" {
			t.Fatalf("REST over the rate: %d %q", status, code)
		}
	}
	// The token is never limited.
	for range 20 {
		if err := admin.Call(ctx, "session.list", map[string]any{}, nil); err != nil {
			t.Fatalf("the token: %v", err)
		}
	}
}

// TestApprovalsFollowSessionAccess: below operator, approval.list shows
// only the approvals of sessions the principal owns or was granted, and
// approval.respond answers the others not_found; an approver grant lets an
// approver answer them.
func TestApprovalsFollowSessionAccess(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	_, annKey := makePrincipal(t, admin, "ann", "member")
	_, bobKey := makePrincipal(t, admin, "bob", "member")
	vicID, vicKey := makePrincipal(t, admin, "vic", "approver")
	ctx := context.Background()
	id := unattendedSession(t, d, annKey)
	ann, _ := helloWSKey(t, d, annKey)
	bob, _ := helloWSKey(t, d, bobKey)
	vic, _ := helloWSKey(t, d, vicKey)
	waitConnections(t, admin, 4)
	if err := ann.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "run ls"}, nil); err != nil {
		t.Fatal(err)
	}
	pending := waitNote(t, admin, "approval.pending")
	reqID := pending["request"].(map[string]any)["requestId"]
	listed := func(c client) int {
		t.Helper()
		var r struct {
			Requests []map[string]any `json:"requests"`
		}
		if err := c.Call(ctx, "approval.list", map[string]any{}, &r); err != nil {
			t.Fatal(err)
		}
		return len(r.Requests)
	}
	if n := listed(bob); n != 0 {
		t.Errorf("bob lists %d approvals of ann's session", n)
	}
	if n := listed(ann); n != 1 {
		t.Errorf("ann lists %d approvals, want 1", n)
	}
	respond := map[string]any{"requestId": reqID, "decision": "allow"}
	if got := codeOf(bob.Call(ctx, "approval.respond", respond, nil)); got != "not_found" {
		t.Errorf("bob answering ann's approval: %q, want not_found", got)
	}
	if got := codeOf(vic.Call(ctx, "approval.respond", respond, nil)); got != "not_found" {
		t.Errorf("vic answering before the share: %q, want not_found", got)
	}
	if err := ann.Call(ctx, "session.share", map[string]any{"sessionId": id, "principalId": vicID, "role": "approver"}, nil); err != nil {
		t.Fatal(err)
	}
	if n := listed(vic); n != 1 {
		t.Errorf("vic lists %d approvals after the share, want 1", n)
	}
	if err := vic.Call(ctx, "approval.respond", respond, nil); err != nil {
		t.Fatalf("vic answering with an approver grant: %v", err)
	}
	evs := collect(t, ann.Events(id), "turn.done", 1)
	if r := findKind(evs, "tool.result"); len(r) != 1 || r[0]["ok"] != true {
		t.Fatalf("after vic's allow: %v", r)
	}
}

// TestAttribution: the events of user-originated actions name the acting
// principal, over WebSocket with two keys: ann's prompt (message.user) and
// mode change (mode.changed), vic's answer to the approval of ann's
// session (approval.resolved.principal, besides its connection id in by)
// and the allowlist entry its session scope added, an entry the admin adds
// with permission.allowlist.add, and ann's interactive answer to an
// approval.request on her connection.
func TestAttribution(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	annID, annKey := makePrincipal(t, admin, "ann", "member")
	vicID, vicKey := makePrincipal(t, admin, "vic", "approver")
	ctx := context.Background()
	id := unattendedSession(t, d, annKey)
	ann, _ := helloWSKey(t, d, annKey)
	vic, _ := helloWSKey(t, d, vicKey)
	waitConnections(t, admin, 3)
	if err := ann.Call(ctx, "session.share", map[string]any{"sessionId": id, "principalId": vicID, "role": "approver"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := ann.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "run ls"}, nil); err != nil {
		t.Fatal(err)
	}
	pending := waitNote(t, admin, "approval.pending")
	reqID := pending["request"].(map[string]any)["requestId"]
	if err := vic.Call(ctx, "approval.respond", map[string]any{"requestId": reqID, "decision": "allow", "scope": "session"}, nil); err != nil {
		t.Fatalf("vic answering: %v", err)
	}
	resolved := waitNote(t, admin, "approval.resolved")
	if p, _ := resolved["principal"].(map[string]any); resolved["requestId"] != reqID || p["id"] != vicID || p["name"] != "vic" {
		t.Fatalf("approval.resolved %v, want principal vic (%s)", resolved, vicID)
	}
	if by, _ := resolved["by"].(string); by == "" || by == vicID {
		t.Fatalf("approval.resolved.by %q, want vic's connection id", by)
	}
	evs := collect(t, ann.Events(id), "turn.done", 1)
	// The entry vic's answer added, and one the admin adds, name who.
	if err := admin.Call(ctx, "permission.allowlist.add", map[string]any{"pattern": "web_fetch", "scope": "always"}, nil); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Patterns []struct {
			Pattern, Scope string
			Principal      *struct{ ID, Name string }
		}
	}
	if err := admin.Call(ctx, "permission.allowlist.list", map[string]any{}, &list); err != nil {
		t.Fatal(err)
	}
	added := map[string]string{}
	for _, p := range list.Patterns {
		if p.Principal != nil {
			added[p.Scope+" "+p.Pattern] = p.Principal.ID + " " + p.Principal.Name
		}
	}
	want := map[string]string{"session shell(ls*)": vicID + " vic", "always web_fetch": "builtin-admin admin (daemon token)"}
	if !reflect.DeepEqual(added, want) {
		t.Fatalf("allowlist entries by principal %v (list %+v), want %v", added, list.Patterns, want)
	}
	users := findKind(evs, "message.user")
	if len(users) != 1 {
		t.Fatalf("%d message.user events: %v", len(users), eventKinds(evs))
	}
	if p, _ := users[0]["principal"].(map[string]any); p["id"] != annID || p["name"] != "ann" {
		t.Fatalf("message.user %v, want principal ann (%s)", users[0], annID)
	}
	if err := ann.Call(ctx, "session.setMode", map[string]any{"sessionId": id, "mode": "auto"}, nil); err != nil {
		t.Fatal(err)
	}
	modes := findKind(collect(t, ann.Events(id), "mode.changed", 1), "mode.changed")
	if p, _ := modes[0]["principal"].(map[string]any); p["id"] != annID || modes[0]["mode"] != "auto" {
		t.Fatalf("mode.changed %v, want principal ann (%s)", modes[0], annID)
	}
	// ann interrupts a running turn: its turn.done names her; a turn that
	// completes names nobody.
	if err := ann.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "slow"}, nil); err != nil {
		t.Fatal(err)
	}
	collect(t, ann.Events(id), "message.delta", 1)
	if err := ann.Call(ctx, "session.interrupt", map[string]any{"sessionId": id}, nil); err != nil {
		t.Fatal(err)
	}
	done := findKind(collect(t, ann.Events(id), "turn.done", 1), "turn.done")
	if p, _ := done[0]["principal"].(map[string]any); done[0]["reason"] != "interrupted" || p["id"] != annID || p["name"] != "ann" {
		t.Fatalf("turn.done of the interrupted turn %v, want reason interrupted and principal ann (%s)", done[0], annID)
	}
	if p := findKind(evs, "turn.done")[0]["principal"]; p != nil {
		t.Fatalf("turn.done of a completed turn names %v, want no principal", p)
	}

	// An interactive answer to approval.request on ann's own connection:
	// the facade's approver stream carries every connection under the
	// daemon token, naming each connection's key, so it is ann's.
	a := &approver{reply: map[string]any{"decision": "allow"}}
	ann.onRequest = a.handle
	own := createSession(t, ann, nil)
	if err := ann.Call(ctx, "session.prompt", map[string]any{"sessionId": own, "text": "run ls"}, nil); err != nil {
		t.Fatal(err)
	}
	resolved = waitNote(t, admin, "approval.resolved")
	if p, _ := resolved["principal"].(map[string]any); a.count() != 1 || p["id"] != annID || p["name"] != "ann" {
		t.Fatalf("interactive approval.resolved %v (asked %d times), want principal ann (%s)", resolved, a.count(), annID)
	}
	if r := findKind(collect(t, ann.Events(own), "turn.done", 1), "tool.result"); len(r) != 1 || r[0]["ok"] != true {
		t.Fatalf("after ann's interactive allow: %v", r)
	}
}

// TestApprovalNotificationsFollowSessionAccess: approval.pending and
// approval.resolved reach a connection only for the sessions its
// principal may read. bob (a member) sees nothing of ann's approval, then
// the approval of his own session as his first approval notification;
// ann and the token see hers; a viewer, below the queue's least role
// (approver), gets none.
func TestApprovalNotificationsFollowSessionAccess(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	_, annKey := makePrincipal(t, admin, "ann", "member")
	_, bobKey := makePrincipal(t, admin, "bob", "member")
	_, vivKey := makePrincipal(t, admin, "viv", "viewer")
	ctx := context.Background()
	// Their approvals go to the unattended queue, which every watcher that
	// may read them is told of.
	annSession, bobSession := unattendedSession(t, d, annKey), unattendedSession(t, d, bobKey)
	ann, _ := helloWSKey(t, d, annKey)
	bob, _ := helloWSKey(t, d, bobKey)
	viv, _ := helloWSKey(t, d, vivKey)
	waitConnections(t, admin, 4)

	// ann's approval: ann and the token are told, and ann answers it.
	if err := ann.Call(ctx, "session.prompt", map[string]any{"sessionId": annSession, "text": "run ls"}, nil); err != nil {
		t.Fatal(err)
	}
	var reqID any
	for _, c := range []*wsClient{admin, ann} {
		req := waitNote(t, c, "approval.pending")["request"].(map[string]any)
		if req["sessionId"] != annSession {
			t.Fatalf("approval.pending of session %v, want ann's %s", req["sessionId"], annSession)
		}
		reqID = req["requestId"]
	}
	if err := ann.Call(ctx, "approval.respond", map[string]any{"requestId": reqID, "decision": "allow"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := waitNote(t, ann, "approval.resolved")["requestId"]; got != reqID {
		t.Fatalf("ann: approval.resolved of %v, want %v", got, reqID)
	}
	collect(t, ann.Events(annSession), "turn.done", 1)

	// bob's own approval: the first approval notification bob gets is its
	// pending (ann's pending and resolved never reached him).
	if err := bob.Call(ctx, "session.prompt", map[string]any{"sessionId": bobSession, "text": "run ls"}, nil); err != nil {
		t.Fatal(err)
	}
	first := nextApprovalNote(t, bob)
	if first.Method != "approval.pending" || first.params["request"].(map[string]any)["sessionId"] != bobSession {
		t.Fatalf("bob's first approval notification: %s %v, want the approval.pending of his session %s", first.Method, first.params, bobSession)
	}
	// viv, a viewer, is told of no approval at all: the next notification
	// viv gets is the commands.changed every key may watch.
	if err := admin.Call(ctx, "skill.reload", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	if n := nextNote(t, viv); n.Method != "commands.changed" {
		t.Fatalf("viv's first notification: %s %s, want commands.changed", n.Method, n.Params)
	}
}

// approvalNote is a notification with its params decoded.
type approvalNote struct {
	Method string
	params map[string]any
}

// nextApprovalNote returns the next approval.pending or approval.resolved
// notification c receives.
func nextApprovalNote(t *testing.T, c *wsClient) approvalNote {
	t.Helper()
	for {
		n := nextNote(t, c)
		if n.Method == "approval.pending" || n.Method == "approval.resolved" {
			var p map[string]any
			_ = json.Unmarshal(n.Params, &p)
			return approvalNote{Method: n.Method, params: p}
		}
	}
}

// nextNote returns the next notification c receives (other than
// session.event), failing after 10 s.
func nextNote(t *testing.T, c *wsClient) frame {
	t.Helper()
	select {
	case f := <-c.notes:
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("no notification within 10 s")
		return frame{}
	}
}

// TestConsoleLogsInWithAKey: the console's login page trades an API key
// the runtime accepts for its session cookie, whose /ui/token gives the
// page that key (system.hello then runs as its principal); an unknown key
// is refused with a message naming what to do.
func TestConsoleLogsInWithAKey(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	_, annKey := makePrincipal(t, admin, "ann", "member")
	base := fmt.Sprintf("http://127.0.0.1:%d", d.HTTPPort())
	login := func(body string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Post(base+"/ui/login", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, bad := range []struct{ body, want string }{
		{`{"key":"tk_nope"}`, "this API key is not accepted"},
		{`{"key":"` + annKey + `","code":"x"}`, "POST /ui/login takes"},
	} {
		if resp, body := login(bad.body); resp.StatusCode/100 != 4 || !strings.Contains(body, bad.want) {
			t.Errorf("login %s: %d %s, want a 4xx saying %q", bad.body, resp.StatusCode, body, bad.want)
		}
	}
	resp, body := login(`{"key":"` + annKey + `"}`)
	if resp.StatusCode != http.StatusNoContent || len(resp.Cookies()) != 1 {
		t.Fatalf("login with ann's key: %d %s", resp.StatusCode, body)
	}
	cookie := resp.Cookies()[0]
	if !cookie.HttpOnly || strings.Contains(cookie.Value, annKey) {
		t.Fatalf("the cookie %+v is not HttpOnly or shows the key", cookie)
	}
	req, _ := http.NewRequest("GET", base+"/ui/token", nil)
	req.AddCookie(cookie)
	tokResp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tok struct{ Token string }
	json.NewDecoder(tokResp.Body).Decode(&tok)
	tokResp.Body.Close()
	if tok.Token != annKey {
		t.Fatalf("/ui/token gave %q, want ann's key", tok.Token)
	}
	if _, role := helloWSKey(t, d, tok.Token); role != "member" {
		t.Fatalf("hello with the console's credential: role %q, want ann's member", role)
	}
}

// TestKeyRunningSessionsLimit: a key made with maxRunningSessions 1 keeps
// one session running: hello advertises the limit; a prompt that would
// start a turn on a second idle session answers rate_limited (with
// retryAfterMs) and starts nothing; a prompt queued behind the running
// turn is taken; once that session's turns end, the second session runs.
// Out-of-range limits are invalid_params.
func TestKeyRunningSessionsLimit(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	ctx := context.Background()
	annID, _ := makePrincipal(t, admin, "ann", "member")
	for _, bad := range []int{0, -1, 1001} {
		err := admin.Call(ctx, "key.create", map[string]any{"principalId": annID, "maxRunningSessions": bad}, nil)
		if codeOf(err) != "invalid_params" || !strings.Contains(err.Error(), "maxRunningSessions") {
			t.Errorf("key.create maxRunningSessions %d: %v, want invalid_params naming it", bad, err)
		}
	}
	var k struct {
		Secret string `json:"secret"`
		Key    struct {
			MaxRunningSessions int `json:"maxRunningSessions"`
		} `json:"key"`
	}
	if err := admin.Call(ctx, "key.create", map[string]any{"principalId": annID, "maxRunningSessions": 1}, &k); err != nil {
		t.Fatal(err)
	}
	if k.Key.MaxRunningSessions != 1 {
		t.Fatalf("key.create answer %+v, want maxRunningSessions 1", k.Key)
	}
	ann := dialWS(t, d)
	var hello struct {
		Limits struct {
			KeyMaxRunningSessions int `json:"keyMaxRunningSessions"`
		} `json:"limits"`
	}
	if err := ann.Call(ctx, "system.hello", map[string]any{"token": k.Secret, "clientVersion": "test", "protocolVersion": "1.0.0"}, &hello); err != nil {
		t.Fatal(err)
	}
	if hello.Limits.KeyMaxRunningSessions != 1 {
		t.Fatalf("hello limits %+v, want keyMaxRunningSessions 1", hello.Limits)
	}
	first, second := createSession(t, ann, nil), createSession(t, ann, nil)
	prompt := func(id, text string) *errcode.Error {
		err := ann.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": text}, nil)
		if err == nil {
			return nil
		}
		return err
	}
	if err := prompt(first, "slow"); err != nil {
		t.Fatal(err)
	}
	collect(t, ann.Events(first), "message.delta", 1)
	err := prompt(second, "hello")
	if err == nil || !err.HasCode("rate_limited") || err.Data["limit"] != "keyMaxRunningSessions" || err.Data["retryAfterMs"] == nil {
		t.Fatalf("a prompt on a second session: %v (data %v), want rate_limited naming keyMaxRunningSessions", err, err)
	}
	if err := prompt(first, "hello"); err != nil {
		t.Fatalf("a prompt queued behind the running turn: %v", err)
	}
	if err := ann.Call(ctx, "session.interrupt", map[string]any{"sessionId": first}, nil); err != nil {
		t.Fatal(err)
	}
	collect(t, ann.Events(first), "turn.done", 1)
	// The queued prompt was dropped with the interrupt: the session is idle
	// once its turn has wound down (session.interrupt waits for that, up to
	// a bound; a client past it retries, here polling the limit itself).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := prompt(second, "hello")
		if err == nil {
			break
		}
		if !err.HasCode("rate_limited") || time.Now().After(deadline) {
			t.Fatalf("a prompt on the second session once the first is idle: %v", err)
		}
	}
	evs := collect(t, ann.Events(second), "turn.done", 1)
	if r := findKind(evs, "turn.done"); r[0]["reason"] != "complete" {
		t.Fatalf("the second session's turn: %v", r[0])
	}
}
