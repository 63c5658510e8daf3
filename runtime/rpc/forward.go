package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/errs"
)

// MDForwardedBy marks a call one daemon forwarded to another (its value is
// the forwarding daemon's id): such a call is served or refused, never
// forwarded again, so that a lease changing hands cannot make calls loop.
const MDForwardedBy = "trellis-forwarded-by"

// forwardedMethods act on one session (named by the request's session_id)
// and run on the daemon holding that session's lease.
var forwardedMethods = map[string]bool{
	"/trellis.v1.SessionService/ResumeSession": true,
	"/trellis.v1.SessionService/CloseSession":  true,
	"/trellis.v1.SessionService/Prompt":        true,
	"/trellis.v1.SessionService/Interrupt":     true,
	"/trellis.v1.SessionService/Compact":       true,
	"/trellis.v1.SessionService/DeleteSaved":   true,
	"/trellis.v1.SessionService/SetMode":       true,
	"/trellis.v1.ToolService/RunCommand":       true,
	"/trellis.v1.BackendService/SetBackend":    true,
}

// Owners decides where a session's calls run (runtime/cluster.Node).
type Owners interface {
	// Acquire returns nil when this daemon holds the session's lease
	// (taking it when free or expired) and a *cluster.NotOwnerError naming
	// the owner's address otherwise.
	Acquire(ctx context.Context, sessionID string) error
}

// Forwarder sends the calls on sessions owned by other daemons to them.
type Forwarder struct {
	owners Owners
	selfID string
	token  string

	tls *tls.Config // nil: the other daemons serve plain gRPC

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewForwarder returns a forwarder for this daemon (selfID); token
// authenticates its calls to the other daemons when the caller's own
// metadata carries none (every daemon of a cluster shares one token).
// With tlsCfg the other daemons are reached over TLS, their certificates
// checked with it (nil: plain gRPC).
func NewForwarder(owners Owners, selfID, token string, tlsCfg *tls.Config) *Forwarder {
	return &Forwarder{owners: owners, selfID: selfID, token: token, tls: tlsCfg, conns: map[string]*grpc.ClientConn{}}
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
	if f == nil || !forwardedMethods[info.FullMethod] {
		return h(ctx, req)
	}
	id := sessionIDOf(req)
	if strings.TrimSpace(id) == "" {
		return h(ctx, req)
	}
	err := f.owners.Acquire(ctx, id)
	var other *cluster.NotOwnerError
	switch {
	case err == nil:
		return h(ctx, req)
	case !errors.As(err, &other):
		return nil, err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(MDForwardedBy)) > 0 {
		return nil, errs.New(errs.Overloaded, "session %s moved to daemon %s while this call was being forwarded; try again", id, other.Owner).
			WithData("retryAfterMs", 200)
	}
	return f.forward(ctx, md, info.FullMethod, req.(proto.Message), other)
}

// Prompt sends session.prompt to the session's owner on behalf of this
// daemon itself (its token, no origin: approvals go to the unattended
// queue), for in-process callers such as the gateway that found the session
// owned elsewhere (owner is Acquire's error). It returns the turn id.
func (f *Forwarder) Prompt(ctx context.Context, owner *cluster.NotOwnerError, sessionID, text string) (string, error) {
	resp, err := f.forward(ctx, metadata.MD{}, "/trellis.v1.SessionService/Prompt", &trellisv1.PromptRequest{SessionId: sessionID, Text: text}, owner)
	if err != nil {
		return "", err
	}
	return resp.(*trellisv1.PromptResponse).GetTurnId(), nil
}

// forward runs the call on the owner with the caller's metadata (token,
// origin, client id), so that the owner sees the same caller.
func (f *Forwarder) forward(ctx context.Context, md metadata.MD, method string, req proto.Message, owner *cluster.NotOwnerError) (any, error) {
	resp, err := newResponse(method)
	if err != nil {
		return nil, err
	}
	conn, err := f.conn(owner.Addr)
	if err != nil {
		return nil, err
	}
	out := md.Copy()
	for _, k := range []string{":authority", "content-type", "user-agent", "grpc-accept-encoding", "grpc-timeout"} {
		out.Delete(k)
	}
	out.Set(MDForwardedBy, f.selfID)
	if len(out.Get("authorization")) == 0 {
		out.Set("authorization", "Bearer "+f.token)
	}
	if err := conn.Invoke(metadata.NewOutgoingContext(ctx, out), method, req, resp); err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable && len(st.Details()) == 0 {
			// The owner is unreachable (it crashed): its lease expires
			// soon and then any daemon takes the session over.
			return nil, errs.New(errs.Overloaded, "session %s is owned by daemon %s at %s, which does not answer (%s); it is taken over when its lease expires: try again",
				owner.SessionID, owner.Owner, owner.Addr, st.Message()).WithData("retryAfterMs", 1000)
		}
		return nil, err // the owner's status, details included
	}
	return resp, nil
}

func (f *Forwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.conns[addr]; c != nil {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if f.tls != nil {
		creds = credentials.NewTLS(f.tls.Clone())
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(32<<20)))
	if err != nil {
		return nil, errs.Wrap(errs.Internal, err, "connect to daemon at %s", addr)
	}
	f.conns[addr] = c
	return c, nil
}

// newResponse returns an empty response message of a method such as
// "/trellis.v1.SessionService/Prompt", from the registered descriptors.
func newResponse(method string) (proto.Message, error) {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		return nil, errs.New(errs.Internal, "cannot forward %s: not a gRPC method name", method)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, errs.Wrap(errs.Internal, err, "cannot forward %s", method)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok || sd.Methods().ByName(protoreflect.Name(name)) == nil {
		return nil, errs.New(errs.Internal, "cannot forward %s: unknown method", method)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(sd.Methods().ByName(protoreflect.Name(name)).Output().FullName())
	if err != nil {
		return nil, errs.Wrap(errs.Internal, err, "cannot forward %s", method)
	}
	return mt.New().Interface(), nil
}
