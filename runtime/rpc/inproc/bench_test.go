package inproc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/test/bufconn"

	"github.com/trellis-run/trellis/runtime/rpc/inproc"
)

// streamer sends as many small messages as the request asks for.
type streamer struct {
	testpb.UnimplementedTestServiceServer
}

func (streamer) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	body := make([]byte, req.GetResponseParameters()[0].GetSize())
	resp := &testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: body}}
	for range req.GetResponseParameters()[0].GetIntervalUs() {
		if err := ss.Send(resp); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkServerStream is one message of a server stream, received: the
// in-process channel against the transport it replaced (bufconn, HTTP/2
// in memory) and loopback TCP; ns/op and allocs/op are per message.
func BenchmarkServerStream(b *testing.B) {
	for _, size := range []int32{200, 16 << 10} {
		conns := map[string]grpc.ClientConnInterface{}
		ch := inproc.NewChannel(nil, nil)
		testpb.RegisterTestServiceServer(ch, streamer{})
		conns["inproc"] = ch.Conn(nil)

		gs := grpc.NewServer()
		testpb.RegisterTestServiceServer(gs, streamer{})
		bl := bufconn.Listen(1 << 20)
		go func() { _ = gs.Serve(bl) }()
		defer gs.Stop()
		bc, err := grpc.NewClient("passthrough:///b", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer bc.Close()
		conns["bufconn"] = bc

		for _, name := range []string{"inproc", "bufconn"} {
			c := testpb.NewTestServiceClient(conns[name])
			b.Run(name+"/"+map[int32]string{200: "200B", 16 << 10: "16KiB"}[size], func(b *testing.B) {
				b.ReportAllocs()
				s, err := c.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{
					ResponseParameters: []*testpb.ResponseParameters{{Size: size, IntervalUs: int32(b.N)}},
				})
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := s.Recv(); err != nil {
						if !errors.Is(err, io.EOF) {
							b.Fatal(err)
						}
						break
					}
				}
			})
		}
	}
}
