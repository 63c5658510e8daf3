package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	trellisclient "github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/internal/testcert"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/ws"
)

// TestTLS: with --tls-cert/--tls-key both ports serve TLS only: wss://,
// https:// (REST) and gRPC over TLS work with the daemon's certificate,
// plain connections do not; daemon.json says so, and the Go client (the
// CLI's) connects from it. A non-loopback bind without TLS is refused.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	testcert.Write(t, certFile, keyFile)
	d := startDaemonWith(t, daemon.Config{TLSCert: certFile, TLSKey: keyFile})
	info, err := daemonfile.Read(d.Home())
	if err != nil {
		t.Fatal(err)
	}
	if !info.TLS || info.TLSCert != certFile {
		t.Fatalf("daemon.json: tls %v, tlsCert %q", info.TLS, info.TLSCert)
	}
	httpBase, wsBase, hc, err := trellisclient.BaseURLs(info)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(wsBase, "wss://") || !strings.HasPrefix(httpBase, "https://") {
		t.Fatalf("bases %s %s", httpBase, wsBase)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// WebSocket over TLS, through the Go client the CLI uses.
	c, err := trellisclient.DialInfo(ctx, info, trellisclient.Options{})
	if err != nil {
		t.Fatalf("the Go client over wss://: %v", err)
	}
	if err := c.Call(ctx, "session.list", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := trellisclient.Health(ctx, info); err != nil {
		t.Fatalf("/health over https: %v", err)
	}
	// Plain WebSocket: refused.
	if conn, err := ws.Dial(ctx, fmt.Sprintf("ws://127.0.0.1:%d/ws", d.HTTPPort()), ws.Options{}); err == nil {
		conn.Close()
		t.Fatal("a plain ws:// connection was accepted")
	}
	// REST over TLS with the token.
	req, _ := http.NewRequestWithContext(ctx, "GET", httpBase+"/v1/session/list", nil)
	req.Header.Set("Authorization", "Bearer "+d.Token())
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("REST over https: %d %s", resp.StatusCode, body)
	}

	// gRPC over TLS; plain gRPC fails.
	tlsCfg, err := trellisclient.PinnedTLS(certFile)
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", d.GRPCPort())
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+d.Token())
	for name, creds := range map[string]credentials.TransportCredentials{"tls": credentials.NewTLS(tlsCfg), "plain": insecure.NewCredentials()} {
		cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		callCtx, callCancel := context.WithTimeout(authed, 5*time.Second)
		_, err = trellisv1.NewSystemServiceClient(cc).Health(callCtx, &trellisv1.HealthRequest{})
		callCancel()
		cc.Close()
		if (err == nil) != (name == "tls") {
			t.Errorf("gRPC %s: %v", name, err)
		}
	}
	// A certificate other than the daemon's is not trusted.
	other := filepath.Join(dir, "other.pem")
	testcert.Write(t, other, filepath.Join(dir, "other-key.pem"))
	wrong, err := trellisclient.PinnedTLS(other)
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", d.HTTPPort()), wrong); err == nil {
		conn.Close()
		t.Fatal("a client pinning another certificate accepted the daemon's")
	}

	// A non-loopback bind without TLS does not start.
	_, err = daemon.Start(ctx, daemon.Config{Home: t.TempDir(), Host: "0.0.0.0"})
	if err == nil || !strings.Contains(err.Error(), "--tls-cert") || !strings.Contains(err.Error(), "--insecure-no-tls") {
		t.Fatalf("0.0.0.0 without TLS: %v", err)
	}
}
