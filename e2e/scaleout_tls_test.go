package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	trellisclient "github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/internal/testbin"
	"github.com/trellis-run/trellis/internal/testcert"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/rpc"
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

// captureProxy is a TCP proxy that keeps every byte it relays, both ways.
type captureProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	bytes bytes.Buffer
	conns int
}

// newCaptureProxy listens on a loopback port and relays each connection to
// the port target names (dialled when the connection comes).
func newCaptureProxy(t *testing.T, target func() string) *captureProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &captureProxy{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target())
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns++
			p.mu.Unlock()
			relay := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 {
						p.mu.Lock()
						p.bytes.Write(buf[:n])
						p.mu.Unlock()
						if _, werr := dst.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				dst.Close()
				src.Close()
			}
			go relay(out, in)
			go relay(in, out)
		}
	}()
	return p
}

func (p *captureProxy) Addr() string { return p.ln.Addr().String() }

// captured returns a copy of the bytes relayed so far and how many
// connections carried them.
func (p *captureProxy) captured() ([]byte, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.bytes.Bytes()), p.conns
}

// inClear reports which of secrets appear in capture as a plain-text
// HTTP/2 header would carry them: as they are, or Huffman-coded by HPACK,
// alone or as an `authorization: Bearer` value.
func inClear(capture []byte, secrets map[string]string) []string {
	var found []string
	for name, s := range secrets {
		for _, form := range []string{s, "Bearer " + s} {
			if bytes.Contains(capture, []byte(form)) || bytes.Contains(capture, hpack.AppendHuffmanString(nil, form)) {
				found = append(found, name)
				break
			}
		}
	}
	return found
}

// clusterCertFlags writes a public certificate (--tls-cert), a cluster CA and a
// certificate of it for each name, and returns the flags of each daemon.
func clusterCertFlags(t *testing.T, dir string, names ...string) (certFile string, flags map[string][]string) {
	t.Helper()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	testcert.Write(t, certFile, keyFile)
	caFile := filepath.Join(dir, "cluster-ca.pem")
	ca := testcert.NewCA(t, "trellis cluster CA", caFile)
	flags = map[string][]string{}
	for _, n := range names {
		cc, ck := filepath.Join(dir, n+".pem"), filepath.Join(dir, n+"-key.pem")
		ca.Issue(t, "trellisd "+n, cc, ck)
		flags[n] = []string{"--tls-cert", certFile, "--tls-key", keyFile, "--cluster-ca", caFile, "--cluster-cert", cc, "--cluster-key", ck}
	}
	return certFile, flags
}

// TestPostgresScaleOutMutualTLS: three daemons on one PostgreSQL with
// mutual TLS between them. A member's session made on A is prompted
// through B and watched (resumed) through C: B and C forward the calls to A
// over mutual TLS, where they run as the member (another member gets
// not_found through B and C as through A). Every byte between the daemons
// passes a proxy in front of A's gRPC port (A advertises it): no key and
// no token is in it in clear. A daemon without the cluster certificate
// cannot join, a call forwarded without one is refused, and a daemon whose
// certificate another CA signed cannot forward.
func TestPostgresScaleOutMutualTLS(t *testing.T) {
	dsn := pgtest.FreshDatabase(t, pgtest.Server(t))
	dir := t.TempDir()
	certFile, flags := clusterCertFlags(t, dir, "a", "b", "c")
	public := []string{"--tls-cert", certFile, "--tls-key", filepath.Join(dir, "key.pem")}
	grpcA := testbin.FreePort(t, 0)
	proxy := newCaptureProxy(t, func() string { return "127.0.0.1:" + strconv.Itoa(grpcA) })
	pa := startClusterProc(t, dsn, append(flags["a"], "--grpc-port", strconv.Itoa(grpcA), "--advertise", proxy.Addr())...)
	var pb, pc *proc
	var wg sync.WaitGroup
	for _, p := range []struct {
		to   **proc
		name string
	}{{&pb, "b"}, {&pc, "c"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			*p.to = startClusterProc(t, dsn, flags[p.name]...)
		}()
	}
	wg.Wait()
	if pb == nil || pc == nil {
		t.FailNow()
	}
	if !pa.info.TLS || !pb.info.TLS || !pc.info.TLS {
		t.Fatalf("daemon.json without tls: %+v %+v %+v", pa.info, pb.info, pc.info)
	}
	cfg, err := trellisclient.PinnedTLS(certFile)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(p *proc) string { return fmt.Sprintf("127.0.0.1:%d", p.info.GRPCPort) }
	admin := dialGRPCTLS(t, addr(pa), pa.info.Token, cfg)
	annID, annKey := makePrincipal(t, admin, "ann", "member")
	_, bobKey := makePrincipal(t, admin, "bob", "member")

	annA := dialGRPCTLS(t, addr(pa), annKey, cfg)
	annB := dialGRPCTLS(t, addr(pb), annKey, cfg)
	annC := dialGRPCTLS(t, addr(pc), annKey, cfg)
	bobB := dialGRPCTLS(t, addr(pb), bobKey, cfg)
	bobC := dialGRPCTLS(t, addr(pc), bobKey, cfg)
	id := createSession(t, annA, nil) // owned by A (its lease), watched from seq 0
	ctx := context.Background()

	// Forwarded as bob: not his session.
	if got := codeOf(bobB.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil)); got != "not_found" {
		t.Fatalf("bob prompting ann's session through B: %q, want not_found", got)
	}
	if got := codeOf(bobC.Call(ctx, "session.resume", map[string]any{"sessionId": id}, nil)); got != "not_found" {
		t.Fatalf("bob resuming ann's session through C: %q, want not_found", got)
	}
	// Forwarded as ann: hers.
	var res struct {
		Events []map[string]any `json:"events"`
	}
	if err := annC.Call(ctx, "session.resume", map[string]any{"sessionId": id}, &res); err != nil {
		t.Fatalf("ann resuming her session through C (forwarded to A): %v", err)
	}
	var turn struct {
		TurnID string `json:"turnId"`
	}
	if err := annB.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, &turn); err != nil {
		t.Fatalf("ann prompting her session through B (forwarded to A): %v", err)
	}
	for i, cl := range []*grpcClient{annA, annC} {
		evs := collect(t, cl.Events(id), "turn.done", 1)
		if p := payloadOf(evs[len(evs)-1]); p["turnId"] != turn.TurnID || p["reason"] != "complete" {
			t.Fatalf("client of daemon %c: turn.done %v", "AC"[i], p)
		}
	}

	// Every call B and C forwarded crossed the proxy, over TLS, and none
	// carried a key or the token.
	capture, conns := proxy.captured()
	if conns == 0 || len(capture) == 0 {
		t.Fatalf("the proxy relayed %d bytes on %d connections: the forwarded calls did not pass it", len(capture), conns)
	}
	if capture[0] != 0x16 { // a TLS handshake record
		t.Fatalf("the daemons' traffic starts with %#x, not a TLS handshake", capture[0])
	}
	if found := inClear(capture, map[string]string{"ann's key": annKey, "bob's key": bobKey, "the token": pa.info.Token}); len(found) > 0 {
		t.Fatalf("%v in clear between the daemons (%d bytes captured)", found, len(capture))
	}
	t.Logf("between the daemons: %d bytes on %d connections, TLS, no key or token in clear", len(capture), conns)

	// A call forwarded without a cluster certificate (what a daemon
	// without one would send, with the token even) is refused.
	conn, err := grpc.NewClient(addr(pa), grpc.WithTransportCredentials(credentials.NewTLS(cfg.Clone())))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	md := metadata.Pairs("authorization", "Bearer "+pa.info.Token, rpc.MDForwardedBy, "d-rogue", rpc.MDForwardedPrincipal, annID)
	_, err = trellisv1.NewSessionServiceClient(conn).Prompt(metadata.NewOutgoingContext(ctx, md), &trellisv1.PromptRequest{SessionId: id, Text: "hello"})
	if st, _ := status.FromError(err); st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), "--cluster-cert") {
		t.Fatalf("a call forwarded without a cluster certificate: %v, want unauthenticated naming --cluster-cert", err)
	}

	// A daemon without the cluster certificate cannot join.
	out, err := runTrellisd(t, append([]string{"--store", dsn}, public...)...)
	if err == nil || !strings.Contains(out, "--cluster-cert") {
		t.Fatalf("a daemon without the cluster certificate: %v\n%s", err, out)
	}

	// A daemon with a certificate of another CA joins (it has one) but
	// cannot forward: A refuses its certificate and it refuses A's.
	other := testcert.NewCA(t, "another CA", filepath.Join(dir, "other-ca.pem"))
	other.Issue(t, "trellisd d", filepath.Join(dir, "d.pem"), filepath.Join(dir, "d-key.pem"))
	pd := startClusterProc(t, dsn, append(public, "--cluster-ca", filepath.Join(dir, "other-ca.pem"),
		"--cluster-cert", filepath.Join(dir, "d.pem"), "--cluster-key", filepath.Join(dir, "d-key.pem"))...)
	annD := dialGRPCTLS(t, addr(pd), annKey, cfg)
	if got := codeOf(annD.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil)); got != "internal" {
		t.Fatalf("ann prompting through a daemon of another CA: %q, want internal", got)
	}
	logText, err := os.ReadFile(daemon.LogPath(pd.home))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logText), "the TLS handshake failed") || !strings.Contains(string(logText), "--cluster-ca") {
		t.Fatalf("the log of the daemon of another CA does not say why it cannot forward:\n%s", logText)
	}
}

// runTrellisd runs a daemon that is expected to refuse to start, with a
// fresh home, and returns its output.
func runTrellisd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, trellisdBin, append([]string{"--home", t.TempDir(), "--provider", "fake"}, args...)...).CombinedOutput()
	return string(out), err
}
