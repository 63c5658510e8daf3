package inproc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/trellis-run/trellis/runtime/rpc/inproc"
)

// testServer echoes what it receives and reports what reached it.
type testServer struct {
	testpb.UnimplementedTestServiceServer
	mu       sync.Mutex
	seen     []string      // incoming "who" metadata, per call
	waiting  chan struct{} // a FullDuplexCall waits for its caller to go away
	released chan struct{} // and has seen it go
}

func (s *testServer) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.seen = append(s.seen, md.Get("who")...)
	s.mu.Unlock()
}

func (s *testServer) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.record(ctx)
	if _, ok := metadata.FromOutgoingContext(ctx); ok {
		if md, _ := metadata.FromOutgoingContext(ctx); len(md) > 0 {
			return nil, status.Error(codes.Internal, "the handler's context carries the caller's outgoing metadata")
		}
	}
	if req.GetResponseSize() < 0 {
		return nil, status.Error(codes.InvalidArgument, "negative size")
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("answered-by", "test"))
	body := req.GetPayload().GetBody()
	// The handler may change its request: the caller's must not change.
	req.Payload.Body = []byte("changed by the handler")
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: body}, Username: "u"}, nil
}

func (s *testServer) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	s.record(ss.Context())
	resp := &testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{}}
	for i, p := range req.GetResponseParameters() {
		// One message reused for every send: each must arrive as it was
		// when it was sent.
		resp.Payload.Body = []byte{byte(i), byte(p.GetSize())}
		if err := ss.Send(resp); err != nil {
			return err
		}
	}
	if st := req.GetResponseStatus(); st != nil {
		return status.Error(codes.Code(st.GetCode()), st.GetMessage())
	}
	return nil
}

func (s *testServer) FullDuplexCall(ss grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	s.record(ss.Context())
	if err := ss.SendHeader(metadata.Pairs("attached", "yes")); err != nil {
		return err
	}
	for {
		req, err := ss.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if req.GetPayload() == nil {
			// Wait for the caller to go away.
			s.waiting <- struct{}{}
			<-ss.Context().Done()
			s.released <- struct{}{}
			return ss.Context().Err()
		}
		if err := ss.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

// order records the order in which the chain's interceptors run.
type order struct {
	mu  sync.Mutex
	got []string
}

func (o *order) add(s string) { o.mu.Lock(); o.got = append(o.got, s); o.mu.Unlock() }

func (o *order) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	g := o.got
	o.got = nil
	return g
}

func (o *order) unary(name string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		o.add(name + " " + info.FullMethod)
		return h(ctx, req)
	}
}

func (o *order) stream(name string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		o.add(name + " " + info.FullMethod)
		return h(srv, ss)
	}
}

// transports returns the same service behind a network server and behind
// an in-process channel, each with the same interceptors; every test runs
// on both and must see the same thing.
func transports(t *testing.T) (map[string]testpb.TestServiceClient, *testServer, *order) {
	t.Helper()
	srv := &testServer{waiting: make(chan struct{}, 1), released: make(chan struct{}, 1)}
	o := &order{}
	unary := []grpc.UnaryServerInterceptor{o.unary("outer"), o.unary("inner")}
	stream := []grpc.StreamServerInterceptor{o.stream("outer"), o.stream("inner")}

	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	testpb.RegisterTestServiceServer(gs, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, "who", "conn"), method, req, reply, cc, opts...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(metadata.AppendToOutgoingContext(ctx, "who", "conn"), desc, cc, method, opts...)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })

	ch := inproc.NewChannel(unary, stream)
	testpb.RegisterTestServiceServer(ch, srv)
	return map[string]testpb.TestServiceClient{
		"network":    testpb.NewTestServiceClient(cc),
		"in-process": testpb.NewTestServiceClient(ch.Conn(metadata.Pairs("who", "conn"))),
	}, srv, o
}

func TestUnary(t *testing.T) {
	clients, srv, o := transports(t)
	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			srv.mu.Lock()
			srv.seen = nil
			srv.mu.Unlock()
			ctx := metadata.AppendToOutgoingContext(context.Background(), "who", "call")
			req := &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("hello")}}
			var header metadata.MD
			resp, err := c.UnaryCall(ctx, req, grpc.Header(&header))
			if err != nil {
				t.Fatal(err)
			}
			if got := string(resp.GetPayload().GetBody()); got != "hello" {
				t.Errorf("answer %q, want hello", got)
			}
			if got := string(req.GetPayload().GetBody()); got != "hello" {
				t.Errorf("the caller's request became %q: the handler shares it", got)
			}
			if got := header.Get("answered-by"); !slices.Equal(got, []string{"test"}) {
				t.Errorf("header answered-by = %q, want [test]", got)
			}
			if got, want := o.take(), []string{"outer /grpc.testing.TestService/UnaryCall", "inner /grpc.testing.TestService/UnaryCall"}; !slices.Equal(got, want) {
				t.Errorf("interceptors ran %q, want %q", got, want)
			}
			srv.mu.Lock()
			seen := srv.seen
			srv.seen = nil
			srv.mu.Unlock()
			slices.Sort(seen)
			if want := []string{"call", "conn"}; !slices.Equal(seen, want) {
				t.Errorf("the handler saw who = %q, want %q (the connection's and the call's metadata)", seen, want)
			}

			_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: -1})
			if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != "negative size" {
				t.Errorf("error %v, want InvalidArgument: negative size", err)
			}
			o.take()
			_, err = c.EmptyCall(ctx, &testpb.Empty{})
			if st, _ := status.FromError(err); st.Code() != codes.Unimplemented {
				t.Errorf("unimplemented method: %v, want Unimplemented", err)
			}
			o.take()
		})
	}
}

func TestServerStream(t *testing.T) {
	clients, _, _ := transports(t)
	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			params := []*testpb.ResponseParameters{{Size: 1}, {Size: 2}, {Size: 3}}
			for _, tc := range []struct {
				name string
				st   *testpb.EchoStatus
				want codes.Code
			}{
				{"ends well", nil, codes.OK},
				{"ends with an error after its messages", &testpb.EchoStatus{Code: int32(codes.Aborted), Message: "stop"}, codes.Aborted},
			} {
				s, err := c.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{ResponseParameters: params, ResponseStatus: tc.st})
				if err != nil {
					t.Fatal(err)
				}
				var got [][]byte
				for {
					m, err := s.Recv()
					if err != nil {
						if errors.Is(err, io.EOF) {
							err = nil
						}
						if status.Code(err) != tc.want {
							t.Errorf("%s: stream ended with %v, want %v", tc.name, err, tc.want)
						}
						break
					}
					got = append(got, m.GetPayload().GetBody())
				}
				if len(got) != 3 || string(got[0]) != "\x00\x01" || string(got[1]) != "\x01\x02" || string(got[2]) != "\x02\x03" {
					t.Errorf("%s: received %q, want the three messages as sent", tc.name, got)
				}
			}
		})
	}
}

func TestBidiStream(t *testing.T) {
	clients, srv, _ := transports(t)
	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			s, err := c.FullDuplexCall(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			h, err := s.Header()
			if err != nil || !slices.Equal(h.Get("attached"), []string{"yes"}) {
				t.Fatalf("header %v, %v; want attached: yes", h, err)
			}
			for _, body := range []string{"a", "b", "c"} {
				req := &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(body)}}
				if err := s.Send(req); err != nil {
					t.Fatal(err)
				}
				req.Payload.Body = []byte("x") // reused by the caller after Send
			}
			if err := s.CloseSend(); err != nil {
				t.Fatal(err)
			}
			var got []string
			for {
				m, err := s.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, string(m.GetPayload().GetBody()))
			}
			if !slices.Equal(got, []string{"a", "b", "c"}) {
				t.Errorf("echoed %q, want [a b c]", got)
			}
		})
	}

	// A caller that goes away ends the handler's context.
	for name, c := range clients {
		t.Run(name+" cancelled", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			s, err := c.FullDuplexCall(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(&testpb.StreamingOutputCallRequest{}); err != nil {
				t.Fatal(err)
			}
			<-srv.waiting
			cancel()
			<-srv.released
			if _, err := s.Recv(); status.Code(err) != codes.Canceled {
				t.Errorf("Recv after cancel: %v, want Canceled", err)
			}
		})
	}
}

// recorder is a stats handler that notes each call's method, and its end.
type recorder struct {
	mu  sync.Mutex
	got []string
}

type methodKey struct{}

func (r *recorder) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, methodKey{}, info.FullMethodName)
}

func (r *recorder) HandleRPC(ctx context.Context, s stats.RPCStats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch s := s.(type) {
	case *stats.Begin:
		r.got = append(r.got, "begin "+ctx.Value(methodKey{}).(string))
	case *stats.End:
		r.got = append(r.got, "end "+status.Code(s.Error).String())
	}
}

func (r *recorder) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (r *recorder) HandleConn(context.Context, stats.ConnStats)                       {}

// TestStatsHandlers: each in-process call begins and ends in the stats
// handlers (tracing's hook), with its status.
func TestStatsHandlers(t *testing.T) {
	rec := &recorder{}
	ch := inproc.NewChannel(nil, nil, rec)
	testpb.RegisterTestServiceServer(ch, &testServer{})
	c := testpb.NewTestServiceClient(ch.Conn(nil))
	if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: -1}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unary: %v", err)
	}
	s, err := c.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream: %v", err)
	}
	// The stream's end is told after its last message; wait for it.
	for {
		rec.mu.Lock()
		n := len(rec.got)
		rec.mu.Unlock()
		if n == 4 {
			break
		}
		runtime.Gosched()
	}
	want := []string{"begin /grpc.testing.TestService/UnaryCall", "end InvalidArgument", "begin /grpc.testing.TestService/StreamingOutputCall", "end OK"}
	if !slices.Equal(rec.got, want) {
		t.Errorf("stats handler saw %q, want %q", rec.got, want)
	}
}

// TestStop: as a network server's, the channel's GracefulStop waits for the
// running handlers and Stop ends them; neither returns while a handler
// runs, and after either a new call is refused with Unavailable.
func TestStop(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(*inproc.Channel)
		// release is what ends the waiting handler: the caller going
		// away for GracefulStop, nothing for Stop.
		release bool
	}{
		{"GracefulStop", (*inproc.Channel).GracefulStop, true},
		{"Stop", (*inproc.Channel).Stop, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &testServer{waiting: make(chan struct{}, 1), released: make(chan struct{}, 1)}
			ch := inproc.NewChannel(nil, nil)
			testpb.RegisterTestServiceServer(ch, srv)
			c := testpb.NewTestServiceClient(ch.Conn(nil))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := c.FullDuplexCall(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(&testpb.StreamingOutputCallRequest{}); err != nil {
				t.Fatal(err)
			}
			<-srv.waiting
			stopped := make(chan struct{})
			go func() { tc.stop(ch); close(stopped) }()
			if tc.release {
				select {
				case <-stopped:
					t.Fatal("GracefulStop returned while a handler was running")
				case <-srv.released:
					t.Fatal("GracefulStop ended a running handler")
				default:
				}
				cancel()
			}
			<-srv.released
			<-stopped
			if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{}); status.Code(err) != codes.Unavailable {
				t.Errorf("a call after %s: %v, want Unavailable", tc.name, err)
			}
			if _, err := c.FullDuplexCall(context.Background()); status.Code(err) != codes.Unavailable {
				t.Errorf("a stream after %s: %v, want Unavailable", tc.name, err)
			}
		})
	}
}
