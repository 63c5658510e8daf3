package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	trellisclient "github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/internal/testcert"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// dialGRPCTLS is dialGRPCAddr over TLS.
func dialGRPCTLS(t *testing.T, addr, token string, cfg *tls.Config) *grpcClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &grpcClient{conn: conn, token: token, origin: "grpc-tls-test-" + t.Name(), subs: map[string]chan map[string]any{}, ctx: ctx, stop: cancel}
	t.Cleanup(c.Close)
	return c
}

// TestPostgresScaleOutTLS: two daemons on one PostgreSQL serving TLS
// (--tls-ca trusting each other's certificate). A member's session made on
// A is prompted through B with the member's key: B forwards the call to A
// over TLS, where it runs as the member (who owns the session); another
// member's key gets not_found through B as through A.
func TestPostgresScaleOutTLS(t *testing.T) {
	dsn := pgtest.FreshDatabase(t, pgtest.Server(t))
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	testcert.Write(t, certFile, keyFile)
	flags := []string{"--tls-cert", certFile, "--tls-key", keyFile, "--tls-ca", certFile}
	pa := startClusterProc(t, dsn, flags...)
	pb := startClusterProc(t, dsn, flags...)
	if !pa.info.TLS || !pb.info.TLS {
		t.Fatalf("daemon.json without tls: %+v %+v", pa.info, pb.info)
	}
	cfg, err := trellisclient.PinnedTLS(certFile)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(p *proc) string { return fmt.Sprintf("127.0.0.1:%d", p.info.GRPCPort) }
	admin := dialGRPCTLS(t, addr(pa), pa.info.Token, cfg)
	_, annKey := makePrincipal(t, admin, "ann", "member")
	_, bobKey := makePrincipal(t, admin, "bob", "member")

	annA := dialGRPCTLS(t, addr(pa), annKey, cfg)
	annB := dialGRPCTLS(t, addr(pb), annKey, cfg)
	bobB := dialGRPCTLS(t, addr(pb), bobKey, cfg)
	id := createSession(t, annA, nil) // owned by A (its lease), watched from seq 0
	ctx := context.Background()
	if got := codeOf(bobB.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil)); got != "not_found" {
		t.Fatalf("bob prompting ann's session through B: %q, want not_found", got)
	}
	var turn struct {
		TurnID string `json:"turnId"`
	}
	if err := annB.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, &turn); err != nil {
		t.Fatalf("ann prompting her session through B (forwarded to A over TLS): %v", err)
	}
	evs := collect(t, annA.Events(id), "turn.done", 1)
	if p := payloadOf(evs[len(evs)-1]); p["turnId"] != turn.TurnID || p["reason"] != "complete" {
		t.Fatalf("turn.done %v", p)
	}
}
