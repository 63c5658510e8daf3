package client_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/trellis-run/trellis/client"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// TestTypedCalls: the generated calls send their params and read their
// results as the protocol renders them: a session made with SessionCreate
// is listed by SessionList with its settings, a principal and key made with
// PrincipalCreate and KeyCreate come back typed (64-bit and optional fields
// included), a call without params sends none, and a refused call is the
// daemon's error with its code.
func TestTypedCalls(t *testing.T) {
	d := startDaemon(t)
	ctx := testCtx(t)
	calls := dial(t, d, client.Options{}).Calls()

	wd := t.TempDir()
	made, err := calls.SessionCreate(ctx, &trellisv1.CreateSessionRequest{Workdir: wd, Mode: proto.String("plan")})
	if err != nil {
		t.Fatal(err)
	}
	list, err := calls.SessionList(ctx, &trellisv1.ListSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var found *trellisv1.SessionSummary
	for _, s := range list.GetSessions() {
		if s.GetSessionId() == made.GetSessionId() {
			found = s
		}
	}
	if found == nil || found.GetWorkdir() != wd || found.GetMode() != "plan" {
		t.Fatalf("session.list has %v for the session made with %s, want workdir %s in plan mode", found, made.GetSessionId(), wd)
	}

	p, err := calls.PrincipalCreate(ctx, &trellisv1.CreatePrincipalRequest{Name: "ci", Role: "member", Kind: proto.String("service"),
		Workdirs: []string{wd}})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.GetPrincipal(); got.GetName() != "ci" || got.GetKind() != "service" || len(got.GetWorkdirs()) != 1 || got.GetCreatedAt() == "" {
		t.Fatalf("principal.create answered %v", got)
	}
	k, err := calls.KeyCreate(ctx, &trellisv1.CreateKeyRequest{PrincipalId: p.GetPrincipal().GetPrincipalId(), RatePerSecond: proto.Int32(50)})
	if err != nil {
		t.Fatal(err)
	}
	if k.GetSecret() == "" || k.GetKey().GetRatePerSecond() != 50 {
		t.Fatalf("key.create answered %v", k)
	}

	if _, err := calls.SystemInfo(ctx, nil); err != nil {
		t.Fatalf("system.info without params: %v", err)
	}
	_, err = calls.SessionClose(ctx, &trellisv1.CloseSessionRequest{SessionId: "s-0000"})
	if client.CodeOf(err) != "not_found" {
		t.Fatalf("session.close of an unknown session: %v (code %q), want not_found", err, client.CodeOf(err))
	}
}
