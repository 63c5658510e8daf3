package inproc

import (
	"context"
	"io"
	"reflect"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Channel holds the services registered on a gRPC server and the server's
// interceptor chain, and opens client connections that call them directly.
// It is a grpc.ServiceRegistrar: register each service on it as well as on
// the network server.
type Channel struct {
	unary  grpc.UnaryServerInterceptor
	stream grpc.StreamServerInterceptor
	stats  []stats.Handler

	mu      sync.RWMutex
	unaries map[string]unaryMethod  // by full method name, "/pkg.Service/Method"
	streams map[string]streamMethod // likewise

	// What the server's GracefulStop and Stop do for the network's calls,
	// for the channel's: once stopping, new calls are refused; calls
	// counts the handlers still running, so that a stop returns only once
	// none is left; halt ends every running handler's context (Stop).
	stopMu   sync.Mutex
	stopping bool
	calls    sync.WaitGroup
	halt     context.Context
	haltAll  context.CancelFunc
}

type unaryMethod struct {
	srv     any
	handler grpc.MethodHandler
}

type streamMethod struct {
	srv  any
	desc grpc.StreamDesc
}

// NewChannel returns a channel that runs every call through unary or stream
// interceptors, in order, the first outermost: the same chain, in the same
// order, as the network server's. Each call begins and ends in handlers
// (the server's stats handlers: tracing), as it would on the server.
func NewChannel(unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor, handlers ...stats.Handler) *Channel {
	halt, haltAll := context.WithCancel(context.Background())
	return &Channel{
		unary:   chainUnary(unary),
		stream:  chainStream(stream),
		stats:   handlers,
		unaries: map[string]unaryMethod{},
		streams: map[string]streamMethod{},
		halt:    halt,
		haltAll: haltAll,
	}
}

// GracefulStop refuses new calls and waits for the running handlers to
// return, as grpc.Server.GracefulStop does for the network's.
func (c *Channel) GracefulStop() {
	c.refuse()
	c.calls.Wait()
}

// Stop refuses new calls, cancels the running handlers' contexts and waits
// for them to return, as grpc.Server.Stop does for the network's.
func (c *Channel) Stop() {
	c.refuse()
	c.haltAll()
	c.calls.Wait()
}

func (c *Channel) refuse() {
	c.stopMu.Lock()
	c.stopping = true
	c.stopMu.Unlock()
}

// enter counts a call in, unless the channel is stopping; the call's
// context is then ended by Stop too. done counts it out.
func (c *Channel) enter(ctx context.Context) (_ context.Context, done func(), err error) {
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	if c.stopping {
		return nil, nil, status.Error(codes.Unavailable, "the server is stopping")
	}
	c.calls.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(c.halt, cancel)
	return ctx, func() { unhook(); cancel(); c.calls.Done() }, nil
}

// RegisterService records the methods of a service implementation.
func (c *Channel) RegisterService(sd *grpc.ServiceDesc, impl any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range sd.Methods {
		c.unaries["/"+sd.ServiceName+"/"+m.MethodName] = unaryMethod{srv: impl, handler: m.Handler}
	}
	for _, s := range sd.Streams {
		c.streams["/"+sd.ServiceName+"/"+s.StreamName] = streamMethod{srv: impl, desc: s}
	}
}

// Conn returns a client connection whose calls carry md (besides the
// metadata of each call's context) as the server would receive it.
func (c *Channel) Conn(md metadata.MD) grpc.ClientConnInterface {
	return &conn{ch: c, md: md}
}

type conn struct {
	ch *Channel
	md metadata.MD
}

// serverContext is the context a handler runs in: the caller's (so that its
// cancellation and deadline reach the handler), with the caller's outgoing
// metadata and the connection's as incoming metadata, and no outgoing
// metadata of its own, as on a network server.
func (c *conn) serverContext(ctx context.Context) context.Context {
	out, _ := metadata.FromOutgoingContext(ctx)
	in := metadata.Join(c.md, out)
	return metadata.NewOutgoingContext(metadata.NewIncomingContext(ctx, in), metadata.MD{})
}

// Invoke runs a unary method: the request is copied in, the reply copied
// out, so that neither side shares a message with the other, as over a
// network.
func (c *conn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	c.ch.mu.RLock()
	m, ok := c.ch.unaries[method]
	c.ch.mu.RUnlock()
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	req, err := clone(args)
	if err != nil {
		return err
	}
	hctx, done, err := c.ch.enter(c.serverContext(ctx))
	if err != nil {
		return err
	}
	defer done()
	sts := &transportStream{method: method}
	sctx := grpc.NewContextWithServerTransportStream(hctx, sts)
	sctx, end := c.ch.begin(sctx, method, false, false)
	dec := func(v any) error { return move(v, req) }
	resp, err := m.handler(m.srv, sctx, dec, c.ch.unary)
	if err != nil {
		err = toStatus(err)
	}
	end(err)
	sts.deliver(opts)
	if err != nil {
		return err
	}
	out, err := clone(resp)
	if err != nil {
		return err
	}
	return move(reply, out)
}

// NewStream starts a streaming method's handler in its own goroutine,
// connected to the returned client stream by buffered queues: a full queue
// blocks its sender, as flow control does on a network.
func (c *conn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c.ch.mu.RLock()
	m, ok := c.ch.streams[method]
	c.ch.mu.RUnlock()
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	hctx, done, err := c.ch.enter(c.serverContext(ctx))
	if err != nil {
		return nil, err
	}
	sctx, end := c.ch.begin(hctx, method, m.desc.ClientStreams, m.desc.ServerStreams)
	sctx, cancel := context.WithCancel(sctx)
	s := &stream{
		clientCtx:   ctx,
		serverCtx:   sctx,
		cancel:      cancel,
		up:          make(chan proto.Message, upQueue),
		down:        make(chan proto.Message, downQueue),
		closedSend:  make(chan struct{}),
		headerReady: make(chan struct{}),
		done:        make(chan struct{}),
		method:      method,
	}
	info := &grpc.StreamServerInfo{FullMethod: method, IsClientStream: m.desc.ClientStreams, IsServerStream: m.desc.ServerStreams}
	go func() {
		defer done()
		err := c.ch.stream(m.srv, (*serverStream)(s), info, m.desc.Handler)
		s.finish(err)
		end(s.err)
	}()
	return (*clientStream)(s), nil
}

// begin tells the stats handlers that a call begins and returns its
// context (a handler may add to it: a span) and the function that tells
// them it ended.
func (c *Channel) begin(ctx context.Context, method string, clientStream, serverStream bool) (context.Context, func(error)) {
	if len(c.stats) == 0 {
		return ctx, func(error) {}
	}
	begin := time.Now()
	for _, h := range c.stats {
		ctx = h.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: method})
		h.HandleRPC(ctx, &stats.Begin{BeginTime: begin, IsClientStream: clientStream, IsServerStream: serverStream})
	}
	return ctx, func(err error) {
		end := &stats.End{BeginTime: begin, EndTime: time.Now(), Error: err}
		for _, h := range c.stats {
			h.HandleRPC(ctx, end)
		}
	}
}

// Queue lengths of a stream, in messages: enough that a sender rarely waits
// for its reader, few enough that a reader that stops reading stops the
// sender soon, as a network's flow-control window would.
const (
	upQueue   = 16
	downQueue = 32
)

// stream is one streaming call, seen from both ends (clientStream and
// serverStream are its two faces).
type stream struct {
	clientCtx, serverCtx context.Context
	cancel               context.CancelFunc
	method               string

	up, down   chan proto.Message // client → server, server → client
	closedSend chan struct{}      // closed by CloseSend
	closeOnce  sync.Once

	mu          sync.Mutex
	header      metadata.MD
	trailer     metadata.MD
	headerOnce  sync.Once
	headerReady chan struct{} // closed when the header is sent (explicitly, with a first message, or at the end)
	done        chan struct{} // closed when the handler has returned
	err         error         // the handler's result, set before done is closed
}

func (s *stream) sendHeader() { s.headerOnce.Do(func() { close(s.headerReady) }) }

func (s *stream) finish(err error) {
	s.mu.Lock()
	if err != nil {
		s.err = toStatus(err)
	}
	s.mu.Unlock()
	s.sendHeader()
	close(s.done)
	s.cancel()
}

// clientStream is the caller's end of a stream.
type clientStream stream

func (s *clientStream) Header() (metadata.MD, error) {
	select {
	case <-s.headerReady:
	case <-s.clientCtx.Done():
		return nil, ctxStatus(s.clientCtx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.header.Copy(), nil
}

func (s *clientStream) Trailer() metadata.MD {
	select {
	case <-s.done:
	default:
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trailer.Copy()
}

func (s *clientStream) CloseSend() error {
	s.closeOnce.Do(func() { close(s.closedSend) })
	return nil
}

func (s *clientStream) Context() context.Context { return s.clientCtx }

// SendMsg queues a copy of m for the handler. Once the handler has
// returned it answers io.EOF, and RecvMsg tells why, as on a network.
func (s *clientStream) SendMsg(m any) error {
	msg, err := clone(m)
	if err != nil {
		return err
	}
	select {
	case s.up <- msg:
		return nil
	case <-s.done:
		return io.EOF
	case <-s.clientCtx.Done():
		return ctxStatus(s.clientCtx)
	}
}

// RecvMsg takes the handler's next message; after the handler has returned
// and every message it sent has been taken, io.EOF or its error.
func (s *clientStream) RecvMsg(m any) error {
	select {
	case msg := <-s.down:
		return move(m, msg)
	case <-s.done:
		select {
		case msg := <-s.down:
			return move(m, msg)
		default:
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.err != nil {
			return s.err
		}
		return io.EOF
	case <-s.clientCtx.Done():
		return ctxStatus(s.clientCtx)
	}
}

// serverStream is the handler's end of a stream.
type serverStream stream

func (s *serverStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.header = metadata.Join(s.header, md)
	return nil
}

func (s *serverStream) SendHeader(md metadata.MD) error {
	_ = s.SetHeader(md)
	(*stream)(s).sendHeader()
	return nil
}

func (s *serverStream) SetTrailer(md metadata.MD) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trailer = metadata.Join(s.trailer, md)
}

func (s *serverStream) Context() context.Context { return s.serverCtx }

// SendMsg queues a copy of m for the caller (the handler may reuse m as
// soon as it returns, as it may after a network send).
func (s *serverStream) SendMsg(m any) error {
	msg, err := clone(m)
	if err != nil {
		return err
	}
	(*stream)(s).sendHeader()
	select {
	case s.down <- msg:
		return nil
	case <-s.serverCtx.Done():
		return ctxStatus(s.serverCtx)
	}
}

// RecvMsg takes the caller's next message; io.EOF once the caller has
// closed its side and every message it sent has been taken.
func (s *serverStream) RecvMsg(m any) error {
	select {
	case msg := <-s.up:
		return move(m, msg)
	case <-s.closedSend:
		select {
		case msg := <-s.up:
			return move(m, msg)
		default:
			return io.EOF
		}
	case <-s.serverCtx.Done():
		return ctxStatus(s.serverCtx)
	}
}

// transportStream lets a unary handler set headers and trailers
// (grpc.SetHeader), which the caller receives through grpc.Header and
// grpc.Trailer call options.
type transportStream struct {
	method          string
	mu              sync.Mutex
	header, trailer metadata.MD
}

func (t *transportStream) Method() string { return t.method }

func (t *transportStream) SetHeader(md metadata.MD) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.header = metadata.Join(t.header, md)
	return nil
}

func (t *transportStream) SendHeader(md metadata.MD) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.header = metadata.Join(t.header, md)
	return nil
}

func (t *transportStream) SetTrailer(md metadata.MD) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.trailer = metadata.Join(t.trailer, md)
	return nil
}

// deliver fills the caller's grpc.Header and grpc.Trailer options.
func (t *transportStream) deliver(opts []grpc.CallOption) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			*o.HeaderAddr = t.header.Copy()
		case grpc.TrailerCallOption:
			*o.TrailerAddr = t.trailer.Copy()
		}
	}
}

// clone copies a message, so that sender and receiver never share one.
func clone(m any) (proto.Message, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "in-process call: %T is not a protobuf message", m)
	}
	return proto.Clone(pm), nil
}

// move makes dst the message src is: src must be a fresh copy of the same
// type that nothing else refers to (its fields now belong to dst).
func move(dst any, src proto.Message) error {
	dv, sv := reflect.ValueOf(dst), reflect.ValueOf(src)
	if dv.Kind() != reflect.Pointer || dv.IsNil() || dv.Type() != sv.Type() {
		return status.Errorf(codes.Internal, "in-process call: cannot receive %T into %T", src, dst)
	}
	dv.Elem().Set(sv.Elem())
	return nil
}

// toStatus makes a handler's error what a network caller would receive: a
// status error (a context error becomes Canceled or DeadlineExceeded).
func toStatus(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.FromContextError(err).Err()
}

func ctxStatus(ctx context.Context) error { return status.FromContextError(ctx.Err()).Err() }

// chainUnary makes one interceptor of several, the first outermost.
func chainUnary(ics []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return unaryFrom(ics, 0, info, h)(ctx, req)
	}
}

func unaryFrom(ics []grpc.UnaryServerInterceptor, i int, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) grpc.UnaryHandler {
	if i == len(ics) {
		return h
	}
	return func(ctx context.Context, req any) (any, error) {
		return ics[i](ctx, req, info, unaryFrom(ics, i+1, info, h))
	}
}

// chainStream is chainUnary for streams.
func chainStream(ics []grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return streamFrom(ics, 0, info, h)(srv, ss)
	}
}

func streamFrom(ics []grpc.StreamServerInterceptor, i int, info *grpc.StreamServerInfo, h grpc.StreamHandler) grpc.StreamHandler {
	if i == len(ics) {
		return h
	}
	return func(srv any, ss grpc.ServerStream) error {
		return ics[i](srv, ss, info, streamFrom(ics, i+1, info, h))
	}
}
