package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/version"
)

// Metadata of a call one daemon forwarded to another.
const (
	// MDForwardedBy marks a forwarded call (its value is the forwarding
	// daemon's id): such a call is served or refused, never forwarded
	// again, so that a lease changing hands cannot make calls loop.
	MDForwardedBy = "trellis-forwarded-by"
	// MDForwardedPrincipal is the id of the principal a forwarded call
	// runs as (the forwarding daemon authenticated the caller), and
	// MDForwardedKey the id of the API key it used ("" for the daemon
	// token). They are believed only from a daemon of the cluster: one that
	// presented a certificate of the cluster's CA when the daemons have
	// cluster certificates, else one that sent the cluster's token. The
	// caller's own credentials (its key, or the token and the key of a
	// WebSocket client) are never forwarded.
	MDForwardedPrincipal = "trellis-forwarded-principal"
	MDForwardedKey       = "trellis-forwarded-key"
)

// Owners decides where a session's calls run (runtime/cluster.Node).
type Owners interface {
	// Acquire returns nil when this daemon holds the session's lease
	// (taking it when free or expired) and a *cluster.NotOwnerError naming
	// the owner's address otherwise.
	Acquire(ctx context.Context, sessionID string) error
}

// Forwarder sends the calls on sessions owned by other daemons to them,
// and decides whether a call forwarded to this daemon is believed.
type Forwarder struct {
	ForwarderOptions

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// ForwarderOptions configure a Forwarder.
type ForwarderOptions struct {
	Owners Owners
	SelfID string // this daemon's id
	// Token is the token every daemon of the cluster shares: it
	// authenticates forwarded calls between daemons without cluster
	// certificates (ClusterTLS nil).
	Token string
	// ClusterTLS, when set, is mutual TLS between the daemons: forwarded
	// calls are made over it (presenting this daemon's cluster certificate
	// and checking the owner's), carry no token, and a call forwarded to
	// this daemon is believed only from a peer whose certificate the
	// cluster's CA signed (the server verified it: see MDForwardedPrincipal).
	ClusterTLS *tls.Config
	// Refuse, when not "", is why this daemon cannot forward: calls on
	// sessions other daemons own answer it (as an internal error, logged).
	Refuse string
}

// NewForwarder returns a forwarder for this daemon.
func NewForwarder(o ForwarderOptions) *Forwarder {
	return &Forwarder{ForwarderOptions: o, conns: map[string]*grpc.ClientConn{}}
}

// Close closes the connections to other daemons.
func (f *Forwarder) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for addr, c := range f.conns {
		c.Close()
		delete(f.conns, addr)
	}
}

// sessionIDOf returns the request's top-level session_id ("" if none).
func sessionIDOf(req any) string {
	m, ok := req.(proto.Message)
	if !ok {
		return ""
	}
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName("session_id")
	if fd == nil || fd.Kind() != protoreflect.StringKind {
		return ""
	}
	return r.Get(fd).String()
}

func (f *Forwarder) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if f == nil || !authzTable[info.FullMethod].owner {
		return h(ctx, req)
	}
	id := sessionIDOf(req)
	if strings.TrimSpace(id) == "" {
		return h(ctx, req)
	}
	err := f.Owners.Acquire(ctx, id)
	var other *cluster.NotOwnerError
	switch {
	case err == nil:
		return h(ctx, req)
	case !errors.As(err, &other):
		return nil, err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(MDForwardedBy)) > 0 {
		return nil, errs.New(errcode.Overloaded, "session %s moved to daemon %s while this call was being forwarded; try again", id, other.Owner).
			WithData("retryAfterMs", 200)
	}
	return f.forward(ctx, md, info.FullMethod, req.(proto.Message), other)
}

// Prompt sends session.prompt to the session's owner on behalf of this
// daemon itself (the built-in admin, no origin: approvals go to the
// unattended queue), for in-process callers such as the gateway that found
// the session owned elsewhere (owner is Acquire's error). It returns the
// turn id.
func (f *Forwarder) Prompt(ctx context.Context, owner *cluster.NotOwnerError, sessionID, text string) (string, error) {
	ctx = auth.WithPrincipal(ctx, auth.Builtin())
	resp, err := f.forward(ctx, metadata.MD{}, "/trellis.v1.SessionService/Prompt", &trellisv1.PromptRequest{SessionId: sessionID, Text: text}, owner)
	if err != nil {
		return "", err
	}
	return resp.(*trellisv1.PromptResponse).GetTurnId(), nil
}

// forward runs the call on the owner as the caller's principal (ctx's),
// with the caller's other metadata (origin, client id, trace context), so
// that the owner sees the same caller; never with the caller's key.
func (f *Forwarder) forward(ctx context.Context, md metadata.MD, method string, req proto.Message, owner *cluster.NotOwnerError) (any, error) {
	if f.Refuse != "" {
		return nil, fmt.Errorf("cannot forward %s on session %s to its owner, daemon %s at %s: %s", method, owner.SessionID, owner.Owner, owner.Addr, f.Refuse)
	}
	p, ok := auth.PrincipalFrom(ctx)
	if !ok {
		return nil, fmt.Errorf("cannot forward %s: the call has no principal", method)
	}
	resp, err := newResponse(method)
	if err != nil {
		return nil, err
	}
	conn, err := f.conn(owner.Addr)
	if err != nil {
		return nil, err
	}
	out := md.Copy()
	for _, k := range []string{":authority", "content-type", "user-agent", "grpc-accept-encoding", "grpc-timeout",
		"authorization", MDOnBehalfOf, MDForwardedBy, MDForwardedPrincipal, MDForwardedKey} {
		out.Delete(k)
	}
	out.Set(MDForwardedBy, f.SelfID)
	out.Set(MDForwardedPrincipal, p.ID)
	if p.KeyID != "" {
		out.Set(MDForwardedKey, p.KeyID)
	}
	if f.ClusterTLS == nil {
		// Without cluster certificates the token is what makes this
		// daemon one of the cluster's.
		out.Set("authorization", "Bearer "+f.Token)
	}
	if err := conn.Invoke(metadata.NewOutgoingContext(ctx, out), method, req, resp); err != nil {
		st, ok := status.FromError(err)
		if ok && st.Code() == codes.Unauthenticated {
			// The caller was authenticated here: the owner refused this
			// daemon (no cluster certificate, another CA, another token).
			// That is the deployment's fault, not the caller's key's, so it
			// must not pass as unauthorized (a WebSocket would be closed).
			return nil, fmt.Errorf("daemon %s at %s refused the call forwarded to it: %s", owner.Owner, owner.Addr, st.Message())
		}
		if ok && st.Code() == codes.Unavailable && strings.Contains(st.Message(), "authentication handshake failed") {
			// The owner runs, but the two daemons do not trust each other.
			return nil, fmt.Errorf("cannot forward to daemon %s at %s: the TLS handshake failed (%s); the daemons of a cluster need certificates of one CA (--cluster-ca, --cluster-cert, --cluster-key)",
				owner.Owner, owner.Addr, st.Message())
		}
		if ok && st.Code() == codes.Unavailable && len(st.Details()) == 0 {
			// The owner is unreachable (it crashed): its lease expires
			// soon and then any daemon takes the session over.
			return nil, errs.New(errcode.Overloaded, "session %s is owned by daemon %s at %s, which does not answer (%s); it is taken over when its lease expires: try again",
				owner.SessionID, owner.Owner, owner.Addr, st.Message()).WithData("retryAfterMs", 1000)
		}
		if ok && st.Code() == codes.Unimplemented && len(st.Details()) == 0 {
			// The owner's build has no such method: a cluster mid-upgrade
			// whose owner still runs an older trellisd.
			return nil, olderOwner(method, owner)
		}
		return nil, err // the owner's status, details included
	}
	return resp, nil
}

// olderOwner is the refusal of a call the session's owner does not serve
// because it runs an older build, naming both versions.
func olderOwner(method string, owner *cluster.NotOwnerError) error {
	theirs := owner.Version
	if theirs == "" {
		theirs = "an earlier build"
	}
	return errs.New(errcode.Unsupported, "session %s is served by daemon %s, which runs trellisd %s and does not serve %s; this daemon runs trellisd %s: "+
		"the cluster is mid-upgrade, so try again once every daemon runs %s", owner.SessionID, owner.Owner, theirs, method, version.Server, version.Server).
		WithData("ownerVersion", owner.Version).WithData("version", version.Server)
}

func (f *Forwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.conns[addr]; c != nil {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if f.ClusterTLS != nil {
		creds = credentials.NewTLS(f.ClusterTLS.Clone())
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(32<<20)))
	if err != nil {
		return nil, errs.Wrap(errcode.Internal, err, "connect to daemon at %s", addr)
	}
	f.conns[addr] = c
	return c, nil
}

// newResponse returns an empty response message of a method such as
// "/trellis.v1.SessionService/Prompt", from the registered descriptors.
func newResponse(method string) (proto.Message, error) {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		return nil, errs.New(errcode.Internal, "cannot forward %s: not a gRPC method name", method)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, errs.Wrap(errcode.Internal, err, "cannot forward %s", method)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok || sd.Methods().ByName(protoreflect.Name(name)) == nil {
		return nil, errs.New(errcode.Internal, "cannot forward %s: unknown method", method)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(sd.Methods().ByName(protoreflect.Name(name)).Output().FullName())
	if err != nil {
		return nil, errs.Wrap(errcode.Internal, err, "cannot forward %s", method)
	}
	return mt.New().Interface(), nil
}

// forwardedPrincipal returns the principal a call forwarded by another
// daemon (by, its MDForwardedBy) runs as: the one MDForwardedPrincipal
// names, believed only from a daemon of the cluster. With cluster
// certificates that is a peer whose client certificate the cluster's CA
// signed (the gRPC listener verified it in the handshake), whatever the
// call carries; without them, a call carrying the cluster's token. The
// principal is read from the store again (its role of the moment).
func (i interceptors) forwardedPrincipal(ctx context.Context, md metadata.MD, by string) (auth.Principal, error) {
	f := i.forward
	if f == nil {
		return auth.Principal{}, errs.New(errcode.Unauthorized, "a call forwarded by daemon %s, but this daemon is not a member of a cluster (its store is not PostgreSQL)", by)
	}
	if f.ClusterTLS != nil {
		if !clusterPeer(ctx) {
			return auth.Principal{}, errs.New(errcode.Unauthorized,
				"call forwarded by daemon %s refused: it did not present a certificate signed by this cluster's CA; "+
					"every daemon of the cluster needs --cluster-ca, --cluster-cert and --cluster-key (docs/security.md, \"Mutual TLS between daemons\")", by)
		}
	} else {
		p, err := i.authn.Authenticate(ctx, bearer(md))
		if err != nil || !p.Builtin {
			return auth.Principal{}, errs.New(errcode.Unauthorized,
				"call forwarded by daemon %s refused: it did not carry the cluster's token (daemons of one store share the token kept in the database, or --token-file)", by)
		}
	}
	id := first(md, MDForwardedPrincipal)
	if id == "" {
		return auth.Principal{}, errs.New(errcode.Unauthorized, "call forwarded by daemon %s names no principal (%s)", by, MDForwardedPrincipal)
	}
	return i.authn.Principal(ctx, id, first(md, MDForwardedKey))
}

// clusterPeer reports whether the call came over TLS from a peer that
// presented a verified client certificate: with cluster certificates the
// gRPC listener verifies client certificates against the cluster's CA
// only, so such a peer is a daemon of the cluster.
func clusterPeer(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	return ok && len(ti.State.VerifiedChains) > 0
}

// first is md's first value of key ("" if none).
func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
