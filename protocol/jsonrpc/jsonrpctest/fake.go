package jsonrpctest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/grpcerr"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/protocol/strict"
)

// Method is one entry of a fake method table: the shape of facade/methods'
// Method without the gRPC connection.
type Method struct {
	NewParams func() proto.Message
	Invoke    func(ctx context.Context, params proto.Message) (proto.Message, error)
}

// Table finds a method by its JSON-RPC name, or returns nil.
type Table interface {
	Lookup(name string) *Method
}

// MapTable is a Table backed by a map.
type MapTable map[string]*Method

// Lookup returns t[name].
func (t MapTable) Lookup(name string) *Method { return t[name] }

// Dispatch is the facade's dispatch in miniature: look the method up
// (method_not_found), decode params with codec (invalid_params), invoke,
// map the error with grpcerr, and return the proto result for codec to
// render.
func Dispatch(t Table, errs *grpcerr.Mapper) jsonrpc.Handler {
	return jsonrpc.HandlerFunc(func(ctx context.Context, _ *jsonrpc.Conn, method string, params json.RawMessage) (any, *jsonrpc.Error) {
		m := t.Lookup(method)
		if m == nil {
			return nil, errcode.NewMethodNotFound(method)
		}
		in := m.NewParams()
		if err := strict.Decode(method, params, in); err != nil {
			return nil, err
		}
		out, err := m.Invoke(ctx, in)
		if err != nil {
			return nil, errs.FromError(ctx, err)
		}
		return out, nil
	})
}

// Token is the fake server's auth token.
const Token = "secret-token"

// statusErr builds the gRPC status the runtime would send for a domain error.
func statusErr(c codes.Code, reason, msg string, md map[string]string) error {
	st, err := status.New(c, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: errcode.Domain, Metadata: md})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// FakeTable is a small table over real params and result messages:
// system.hello (token Token, protocol major 1), session.create (answers
// s-1), session.resume (answers two events), test.providerError and
// test.internal (fail like the runtime does).
func FakeTable() MapTable {
	return MapTable{
		"system.hello": {
			NewParams: func() proto.Message { return &trellisv1.HelloRequest{} },
			Invoke: func(_ context.Context, p proto.Message) (proto.Message, error) {
				req := p.(*trellisv1.HelloRequest)
				if major, _, _ := strings.Cut(req.GetProtocolVersion(), "."); major != "1" {
					return nil, statusErr(codes.FailedPrecondition, errcode.ProtocolIncompatible,
						fmt.Sprintf("client speaks protocol %s, server speaks 1.0.0", req.GetProtocolVersion()), nil)
				}
				if req.GetToken() != Token {
					return nil, statusErr(codes.Unauthenticated, errcode.Unauthorized, "bad token", nil)
				}
				return &trellisv1.HelloResponse{
					ProtocolVersion: "1.0.0", ServerVersion: "test", Capabilities: []string{"sessions"},
					Limits:       &trellisv1.Limits{MaxFrameBytes: 32 << 20, MaxInFlight: 1024, MaxBatch: 100},
					ConnectionId: "c-1",
					// The daemon token's principal, as a real daemon answers.
					Principal: &trellisv1.Principal{PrincipalId: "builtin-admin", Name: "admin (daemon token)", Kind: "service", Role: "admin", Builtin: true},
				}, nil
			},
		},
		"session.create": {
			NewParams: func() proto.Message { return &trellisv1.CreateSessionRequest{} },
			Invoke: func(context.Context, proto.Message) (proto.Message, error) {
				return &trellisv1.CreateSessionResponse{SessionId: "s-1"}, nil
			},
		},
		"session.resume": {
			NewParams: func() proto.Message { return &trellisv1.ResumeSessionRequest{} },
			Invoke: func(_ context.Context, p proto.Message) (proto.Message, error) {
				req := p.(*trellisv1.ResumeSessionRequest)
				if req.GetSessionId() != "s-1" {
					return nil, statusErr(codes.NotFound, errcode.NotFound, "no session "+req.GetSessionId(), nil)
				}
				return &trellisv1.ResumeSessionResponse{SessionId: "s-1", Mode: "accept", Provider: "fake", Model: "demo",
					Events: page(
						&trellisv1.SessionEvent{SessionId: "s-1", Seq: 1, Ts: "2026-01-02T03:04:05.000Z", Payload: &trellisv1.SessionEvent_TurnStarted{
							TurnStarted: &trellisv1.TurnStartedEvent{TurnId: "t-1", Prompt: "hi"}}},
						&trellisv1.SessionEvent{SessionId: "s-1", Seq: 2, Ts: "2026-01-02T03:04:05.001Z", Payload: &trellisv1.SessionEvent_Context{
							Context: &trellisv1.ContextEvent{Used: 12}}},
					)}, nil
			},
		},
		"test.providerError": {
			NewParams: func() proto.Message { return &trellisv1.HealthRequest{} },
			Invoke: func(context.Context, proto.Message) (proto.Message, error) {
				return nil, statusErr(codes.Unavailable, errcode.ProviderError, "openai answered 429: slow down",
					map[string]string{"status": "429", "provider": "openai"})
			},
		},
		"test.internal": {
			NewParams: func() proto.Message { return &trellisv1.HealthRequest{} },
			Invoke: func(context.Context, proto.Message) (proto.Message, error) {
				return nil, status.Error(codes.Internal, "database is locked: /home/secret/.trellis/db")
			},
		},
	}
}

// DeterministicErrors is a Mapper whose error ids count e-1, e-2, … and
// whose log goes to log (nil: discarded).
func DeterministicErrors(log *slog.Logger) *grpcerr.Mapper {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var n atomic.Int64
	return &grpcerr.Mapper{Log: log, NewErrorID: func() string { return fmt.Sprintf("e-%d", n.Add(1)) }}
}

// ServeFake serves the fake table behind the system.hello gate on the
// server end of a transport, and returns the connection (Serve runs in its
// own goroutine until the transport closes).
func ServeFake(server jsonrpc.Transport, opts jsonrpc.Options) *jsonrpc.Conn {
	if opts.Errors == nil {
		opts.Errors = DeterministicErrors(opts.Log)
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	h := jsonrpc.Gate("system.hello", Dispatch(FakeTable(), opts.Errors))
	c := jsonrpc.NewConn(server, h, opts)
	go func() { _ = c.Serve(context.Background()) }()
	return c
}

// page is the EventPage of events, as the runtime sends a page: each
// event's protocol JSON object, comma-separated.
func page(events ...*trellisv1.SessionEvent) *trellisv1.EventPage {
	p := &trellisv1.EventPage{}
	for i, ev := range events {
		if i > 0 {
			p.Json = append(p.Json, ',')
		}
		p.Json = codec.AppendMessage(p.Json, ev)
		p.Ends = append(p.Ends, uint32(len(p.Json)))
		p.Seqs = append(p.Seqs, ev.GetSeq())
	}
	return p
}
