package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/rpc/inproc"
)

// Metadata keys the runtime reads from callers.
const (
	// MDOrigin identifies the caller as an origin (a WebSocket connection id
	// set by the facade, or any stable id of a gRPC client). Sessions created
	// or resumed by the caller send their approval requests to the approver
	// attached under this id.
	MDOrigin = "trellis-origin"
	// MDClientID is the stable client id from system.hello.
	MDClientID = "trellis-client-id"
	// MDOnBehalfOf carries the API key of the client a call is made for,
	// when the call itself authenticates with the daemon token: the
	// facade's calls for a WebSocket or REST client that said hello (or
	// sent Bearer) with a key. The call then runs as that key's principal
	// (checked again on every call, so a revoked key stops at once). It is
	// ignored on calls made with a key, and never forwarded to another
	// daemon (MDForwardedPrincipal names the principal instead).
	MDOnBehalfOf = "trellis-on-behalf-of"
)

// Server is the runtime's gRPC server together with its in-process
// channel: a service registered on it is served on the network and to
// in-process callers alike, through the same interceptor chain.
type Server struct {
	*grpc.Server
	inline *inproc.Channel
}

// RegisterService registers a service on the network server and on the
// in-process channel.
func (s *Server) RegisterService(sd *grpc.ServiceDesc, impl any) {
	s.Server.RegisterService(sd, impl)
	s.inline.RegisterService(sd, impl)
}

// GracefulStop stops the network server and the in-process channel
// gracefully: new calls are refused, and it returns once every handler of
// either has returned.
func (s *Server) GracefulStop() {
	s.Server.GracefulStop()
	s.inline.GracefulStop()
}

// Stop stops the network server and the in-process channel: every running
// handler's context is cancelled, and it returns once they have returned.
func (s *Server) Stop() {
	s.Server.Stop()
	s.inline.Stop()
}

// InProcess returns a client connection to the registered services that
// calls their handlers directly (no serialising, no transport), each call
// carrying md as incoming metadata besides its own.
func (s *Server) InProcess(md metadata.MD) grpc.ClientConnInterface { return s.inline.Conn(md) }

// NewServer returns a gRPC server with the standard health service and
// server reflection registered, and the interceptor chain assembled. The
// caller registers the Trellis services on it. creds secures the network
// server's connections (nil: plain); with cluster certificates they verify
// the client certificates that identify the cluster's daemons.
func NewServer(authn *auth.Authenticator, access SessionAccess, securityLog SecurityLog, log *slog.Logger, healthSrv *health.Server, creds credentials.TransportCredentials, inst ...Instrumentation) *Server {
	i := interceptors{authn: authn, access: access, securityLog: securityLog, log: log, limits: newKeyLimiter()}
	// Order matters: instrumentation is outermost so that it sees every
	// call with its final status; recovery comes next so that a panic
	// anywhere below (auth included) becomes an internal error; auth runs
	// before the error mapping so that unauthenticated calls never reach a
	// handler.
	var unary []grpc.UnaryServerInterceptor
	var stream []grpc.StreamServerInterceptor
	var handlers []stats.Handler
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(32 << 20), grpc.MaxSendMsgSize(MaxSendMsgSize), decodeOption()}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	for _, in := range inst {
		unary = append(unary, in.Unary...)
		stream = append(stream, in.Stream...)
		for _, h := range in.Stats {
			opts = append(opts, grpc.StatsHandler(h))
		}
		handlers = append(handlers, in.Stats...)
		if in.Forwarder != nil {
			i.forward = in.Forwarder
		}
		if in.Receipts != nil {
			i.receipts = in.Receipts
		}
	}
	// decode* come before auth so that every undecodable request is taken
	// off the record, authenticated or not. A session call is forwarded to
	// its owner after auth, and below the error mapping, which passes the
	// owner's statuses unchanged. Receipts come last: a call with an
	// operation id keeps its receipt where it acts (a session call on the
	// session's owner, as the principal the forwarding daemon named), so
	// that a daemon that only forwarded it can die without losing its
	// outcome.
	unary = append(unary, i.recoverUnary, decodeUnary, i.authUnary, i.mapErrorsUnary, i.forward.unary, i.receipts.unary)
	stream = append(stream, i.recoverStream, decodeStream, i.authStream, i.mapErrorsStream)
	opts = append(opts, grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	s := &Server{Server: grpc.NewServer(opts...), inline: inproc.NewChannel(unary, stream, handlers...)}
	healthpb.RegisterHealthServer(s.Server, healthSrv)
	reflection.Register(s.Server)
	return s
}

// Instrumentation adds observability to the server: interceptors that run
// outermost (metrics) and stats handlers (tracing).
type Instrumentation struct {
	Unary  []grpc.UnaryServerInterceptor
	Stream []grpc.StreamServerInterceptor
	// Stats are stats handlers (tracing), told of every call, network or
	// in-process.
	Stats []stats.Handler
	// Forwarder, when set, runs the calls on sessions another daemon of
	// the cluster owns on that daemon (scale-out); it runs after auth.
	Forwarder *Forwarder
	// Receipts, when set, keeps the outcomes of mutating calls made with
	// an operation id (receipts.go); it runs after auth.
	Receipts *Receipts
}

type interceptors struct {
	authn  *auth.Authenticator
	access SessionAccess // owners and grants of sessions; nil: no session checks
	// securityLog records the calls of audited methods; nil: none.
	securityLog SecurityLog
	limits      *keyLimiter // per-key request rates
	log         *slog.Logger
	forward     *Forwarder // nil: a daemon alone on its store
	receipts    *Receipts  // nil: operation ids are not kept
}

// openMethod reports whether a method is served without a token: the
// standard health service and server reflection (so that probes and
// `grpcurl list` work).
func openMethod(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/") ||
		strings.HasPrefix(fullMethod, "/grpc.reflection.")
}

// methodAccess is one row of the authorization table (authz.gen.go).
type methodAccess struct {
	name    string // JSON-RPC name ("" for a gRPC-only stream)
	minRole string
	session bool
	audit   bool // every call is recorded in the security audit log
	owner   bool // runs on the session's owner: another daemon forwards it there
	// mutating: the call takes an operation id and keeps a receipt
	// (receipts.go).
	mutating bool
}

// authorizeMethod authenticates the call and checks the caller's role against
// the method's row of the authorization table; it returns ctx carrying the
// caller's principal. Every transport reaches the runtime through here:
// gRPC clients directly, REST with the caller's Bearer, WebSocket and the
// REST event stream with the daemon token plus MDOnBehalfOf.
//
// It returns the principal and the method's row too (ok false for an open
// method); session-scoped rows are then decided by checkSession.
func (i interceptors) authorizeMethod(ctx context.Context, fullMethod string) (context.Context, auth.Principal, methodAccess, bool, error) {
	if openMethod(fullMethod) {
		return ctx, auth.Principal{}, methodAccess{}, false, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var p auth.Principal
	var err error
	by := first(md, MDForwardedBy)
	if by != "" {
		p, err = i.forwardedPrincipal(ctx, md, by)
	} else {
		cred := bearer(md)
		if cred == "" {
			return ctx, auth.Principal{}, methodAccess{}, false, statusWithInfo(codes.Unauthenticated, errcode.Unauthorized,
				"missing token: send `authorization: Bearer <token or API key>` metadata (the token is in the daemon's home directory)", nil)
		}
		p, err = i.authn.Authenticate(ctx, cred)
		if err == nil && p.Builtin {
			if obo := first(md, MDOnBehalfOf); obo != "" {
				p, err = i.authn.Authenticate(ctx, obo)
			}
		}
	}
	if err != nil {
		var e *errs.Error
		if errors.As(err, &e) && e.Code == errcode.Unauthorized {
			return ctx, auth.Principal{}, methodAccess{}, false, statusWithInfo(codes.Unauthenticated, errcode.Unauthorized, e.Msg, nil)
		}
		return ctx, auth.Principal{}, methodAccess{}, false, toStatus(ctx, i.log, fullMethod, err)
	}
	// A forwarded call was counted against its key's rate by the daemon
	// that forwarded it.
	if by == "" {
		if ok, retry := i.limits.allow(p); !ok {
			return ctx, p, methodAccess{}, false, rateLimited(p, retry)
		}
	}
	row, ok := authzTable[fullMethod]
	if !ok {
		// A method without a row is nobody's: the generator gives every
		// RPC of the protos one, so this is a service registered by hand.
		return ctx, auth.Principal{}, methodAccess{}, false, statusWithInfo(codes.PermissionDenied, errcode.Forbidden,
			fmt.Sprintf("%s has no row in the authorization table, so nobody may call it", fullMethod), nil)
	}
	if !auth.Allows(p.Role, row.minRole) {
		// The principal is returned with the refusal for the audit log.
		return ctx, p, row, false, statusWithInfo(codes.PermissionDenied, errcode.Forbidden,
			fmt.Sprintf("%s needs role %s or above; %s has role %s (docs/roles.md)", methodName(fullMethod), row.minRole, p.Name, p.Role),
			map[string]any{"role": p.Role, "minRole": row.minRole})
	}
	return auth.WithPrincipal(ctx, p), p, row, true, nil
}

// bearer is the credential of md's `authorization: Bearer …` ("" if none).
func bearer(md metadata.MD) string {
	for _, v := range md.Get("authorization") {
		if scheme, tok, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
	}
	return ""
}

// methodName is the JSON-RPC name of a method when it has one, else its
// gRPC name.
func methodName(fullMethod string) string {
	if n := authzTable[fullMethod].name; n != "" {
		return n
	}
	return fullMethod
}

func (i interceptors) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	ctx, p, row, ok, err := i.authorizeMethod(ctx, info.FullMethod)
	if authzTable[info.FullMethod].audit {
		defer func() { i.audit(ctx, p, info.FullMethod, req, err) }()
	}
	if err != nil {
		return nil, err
	}
	if ok {
		if err := i.checkSession(ctx, p, info.FullMethod, row, sessionIDOf(req)); err != nil {
			return nil, err
		}
	}
	return h(ctx, req)
}

func (i interceptors) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, p, row, ok, err := i.authorizeMethod(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	ps := &principalStream{ServerStream: ss, ctx: ctx}
	if ok && row.session {
		// The session is named by the first request message: checked as
		// the handler reads it.
		ps.check = func(m any) error { return i.checkSession(ctx, p, info.FullMethod, row, sessionIDOf(m)) }
	}
	return h(srv, ps)
}

// principalStream is a server stream whose context carries the caller's
// principal; check, when set, decides the first message received.
type principalStream struct {
	grpc.ServerStream
	ctx   context.Context
	check func(m any) error
}

func (s *principalStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.check != nil {
		check := s.check
		s.check = nil
		return check(m)
	}
	return nil
}

func (s *principalStream) Context() context.Context { return s.ctx }

func (i interceptors) mapErrorsUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if err != nil {
		return nil, i.mapError(ctx, info.FullMethod, err)
	}
	return resp, nil
}

func (i interceptors) mapErrorsStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return i.mapError(ss.Context(), info.FullMethod, h(srv, ss))
}

// mapError maps a handler's error. A bare Unimplemented status (a method a
// client knows from a newer protocol than this daemon's) answers
// not_implemented rather than a confusing internal error.
func (i interceptors) mapError(ctx context.Context, method string, err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unimplemented && len(st.Details()) == 0 {
		return statusWithInfo(codes.Unimplemented, errcode.NotImplemented,
			fmt.Sprintf("%s is not available in this daemon yet", method), nil)
	}
	return toStatus(ctx, i.log, method, err)
}

func (i interceptors) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = i.panicked(info.FullMethod, r)
		}
	}()
	return h(ctx, req)
}

func (i interceptors) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = i.panicked(info.FullMethod, r)
		}
	}()
	return h(srv, ss)
}

func (i interceptors) panicked(method string, r any) error {
	id := ids.New("e")
	i.log.Error("panic in handler", "errorId", id, "method", method, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	return statusWithInfo(codes.Internal, errcode.Internal,
		"internal error; the daemon log has the details under errorId "+id, map[string]any{"errorId": id})
}

// originOf returns the caller's origin id from metadata ("" when absent).
func originOf(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	return first(md, MDOrigin)
}

// Access returns a method's row of the authorization table (full gRPC
// name): its least role and whether it acts on the session its request
// names; ok is false for a method without a row, which nobody may call.
func Access(fullMethod string) (minRole string, session, ok bool) {
	a, ok := authzTable[fullMethod]
	return a.minRole, a.session, ok
}
