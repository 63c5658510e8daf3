package rpc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/version"
)

const testToken = "0123456789abcdef0123456789abcdef0123456789abcdef"

// TestForwardCarriesThePrincipalNotTheKey: a forwarded call reaches the
// owner with the caller's principal and key ids, its origin, its operation
// id, and (without
// cluster certificates) the cluster's token; never the caller's key, nor a
// WebSocket client's key (MDOnBehalfOf), nor forwarding metadata the
// caller made up.
func TestForwardCarriesThePrincipalNotTheKey(t *testing.T) {
	got := make(chan metadata.MD, 1)
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		got <- md
		var req trellisv1.PromptRequest
		if err := ss.RecvMsg(&req); err != nil {
			return err
		}
		return ss.SendMsg(&trellisv1.PromptResponse{TurnId: "t-1"})
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	f := NewForwarder(ForwarderOptions{SelfID: "d-b", Token: testToken})
	t.Cleanup(f.Close)
	ctx := auth.WithPrincipal(context.Background(), auth.Principal{ID: "p-ann", Name: "ann", Role: "member", KeyID: "k-ann"})
	in := metadata.Pairs("authorization", "Bearer trk_annskey", MDOnBehalfOf, "trk_wsclientkey", MDOrigin, "c-1",
		MDForwardedPrincipal, "builtin-admin", MDForwardedBy, "d-made-up", MDIdempotencyKey, "op-1")
	owner := &cluster.NotOwnerError{SessionID: "s-1", Owner: "d-a", Addr: ln.Addr().String()}
	resp, err := f.forward(ctx, in, "/trellis.v1.SessionService/Prompt", &trellisv1.PromptRequest{SessionId: "s-1", Text: "hi"}, owner)
	if err != nil {
		t.Fatal(err)
	}
	if resp.(*trellisv1.PromptResponse).GetTurnId() != "t-1" {
		t.Fatalf("response %v", resp)
	}
	md := <-got
	want := map[string]string{"authorization": "Bearer " + testToken, MDForwardedBy: "d-b", MDForwardedPrincipal: "p-ann", MDForwardedKey: "k-ann", MDOrigin: "c-1",
		MDIdempotencyKey: "op-1"} // the owner keeps the call's receipt
	for k, v := range want {
		if g := md.Get(k); len(g) != 1 || g[0] != v {
			t.Errorf("%s: %q, want %q", k, g, v)
		}
	}
	if g := md.Get(MDOnBehalfOf); len(g) != 0 {
		t.Errorf("the WebSocket client's key was forwarded: %q", g)
	}
	for k, vs := range md {
		for _, v := range vs {
			if strings.Contains(v, "trk_") {
				t.Errorf("a key crossed to the owner in %s: %q", k, v)
			}
		}
	}

	// With cluster certificates, no token either.
	fm := NewForwarder(ForwarderOptions{SelfID: "d-b", Token: testToken, ClusterTLS: &tls.Config{}})
	out, _ := forwardedMD(fm, ctx, in)
	if g := out.Get("authorization"); len(g) != 0 {
		t.Errorf("over mutual TLS the forwarded call carries authorization %q", g)
	}

	// A forwarder that may not forward says why, as an internal error.
	fr := NewForwarder(ForwarderOptions{SelfID: "d-b", Refuse: "no cluster certificate"})
	if _, err := fr.forward(ctx, in, "/trellis.v1.SessionService/Prompt", &trellisv1.PromptRequest{SessionId: "s-1"}, owner); err == nil || !strings.Contains(err.Error(), "no cluster certificate") || errs.CodeOf(err) != errcode.Internal {
		t.Fatalf("refusing forwarder: %v", err)
	}
}

// TestForwardToAnOlderOwner: in a cluster mid-upgrade, a call forwarded to
// an owner whose build has no such method (a real gRPC server that
// registers none) is refused as unsupported, naming both daemons'
// versions, not passed on as a bare Unimplemented.
func TestForwardToAnOlderOwner(t *testing.T) {
	srv := grpc.NewServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	f := NewForwarder(ForwarderOptions{SelfID: "d-b", Token: testToken})
	t.Cleanup(f.Close)
	ctx := auth.WithPrincipal(context.Background(), auth.Builtin())
	for _, tc := range []struct{ ownerVersion, want string }{
		{"0.0.9", "runs trellisd 0.0.9"},
		{"", "runs trellisd an earlier build"},
	} {
		owner := &cluster.NotOwnerError{SessionID: "s-1", Owner: "d-a", Addr: ln.Addr().String(), Version: tc.ownerVersion}
		_, err := f.forward(ctx, metadata.MD{}, "/trellis.v1.SessionService/Steer", &trellisv1.SteerRequest{SessionId: "s-1", Text: "hi"}, owner)
		if errs.CodeOf(err) != errcode.Unsupported {
			t.Fatalf("owner %q: %v, want unsupported", tc.ownerVersion, err)
		}
		for _, part := range []string{tc.want, "daemon d-a", "SessionService/Steer", "this daemon runs trellisd " + version.Server} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("owner %q: message %q does not say %q", tc.ownerVersion, err, part)
			}
		}
	}
}

// forwardedMD is the metadata f.forward would send for a call with
// metadata in (without sending it).
func forwardedMD(f *Forwarder, ctx context.Context, in metadata.MD) (metadata.MD, error) {
	var out metadata.MD
	cc := grpc.UnaryClientInterceptor(func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ grpc.UnaryInvoker, _ ...grpc.CallOption) error {
		out, _ = metadata.FromOutgoingContext(ctx)
		return nil
	})
	conn, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{})), grpc.WithUnaryInterceptor(cc))
	if err != nil {
		return nil, err
	}
	f.conns["127.0.0.1:1"] = conn
	_, err = f.forward(ctx, in, "/trellis.v1.SessionService/Prompt", &trellisv1.PromptRequest{SessionId: "s-1"}, &cluster.NotOwnerError{SessionID: "s-1", Owner: "d-a", Addr: "127.0.0.1:1"})
	return out, err
}

// TestForwardedPrincipalTrust: the principal a forwarded call names is
// believed only from a daemon of the cluster: with cluster certificates a
// peer whose client certificate was verified (a token does not do), without
// them a call carrying the cluster's token.
func TestForwardedPrincipalTrust(t *testing.T) {
	authn := &auth.Authenticator{Token: testToken}
	md := func(kv ...string) metadata.MD {
		return metadata.Pairs(append([]string{MDForwardedBy, "d-b", MDForwardedPrincipal, auth.BuiltinID}, kv...)...)
	}
	verified := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{}}}}}})
	unverified := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{}})
	plain := NewForwarder(ForwarderOptions{SelfID: "d-a", Token: testToken})
	mutual := NewForwarder(ForwarderOptions{SelfID: "d-a", ClusterTLS: &tls.Config{}})
	for _, tc := range []struct {
		name string
		f    *Forwarder
		ctx  context.Context
		md   metadata.MD
		want string // "" = believed
	}{
		{"token, no cluster certificates", plain, context.Background(), md("authorization", "Bearer "+testToken), ""},
		{"a key, no cluster certificates", plain, context.Background(), md("authorization", "Bearer trk_x"), "did not carry the cluster's token"},
		{"nothing, no cluster certificates", plain, context.Background(), md(), "did not carry the cluster's token"},
		{"verified cluster certificate", mutual, verified, md(), ""},
		{"token without a certificate", mutual, unverified, md("authorization", "Bearer "+testToken), "--cluster-cert"},
		{"no TLS at all", mutual, context.Background(), md("authorization", "Bearer "+testToken), "--cluster-cert"},
		{"no principal named", mutual, verified, metadata.Pairs(MDForwardedBy, "d-b"), "names no principal"},
		{"an unknown principal", mutual, verified, metadata.Pairs(MDForwardedBy, "d-b", MDForwardedPrincipal, "p-gone"), "unknown principal"},
		{"not a cluster member", nil, verified, md(), "not a member of a cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := interceptors{authn: authn, forward: tc.f}
			p, err := i.forwardedPrincipal(tc.ctx, tc.md, "d-b")
			switch {
			case tc.want == "" && (err != nil || !p.Builtin):
				t.Fatalf("refused: %v (%+v)", err, p)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || errs.CodeOf(err) != errcode.Unauthorized):
				t.Fatalf("%v, want unauthorized saying %q", err, tc.want)
			}
		})
	}
}
