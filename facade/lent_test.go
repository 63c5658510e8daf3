package facade

import (
	"context"
	"log/slog"
	"net"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
)

// refusingTools is a runtime whose ServeLentTools refuses every caller.
type refusingTools struct {
	trellisv1.UnimplementedToolServiceServer
}

func (refusingTools) ServeLentTools(grpc.BidiStreamingServer[trellisv1.ServeLentToolsRequest, trellisv1.ServeLentToolsResponse]) error {
	st, err := status.New(codes.PermissionDenied, "lending tools needs the member role").
		WithDetails(&errdetails.ErrorInfo{Reason: errcode.Forbidden, Domain: errcode.Domain})
	if err != nil {
		return err
	}
	return st.Err()
}

// TestLenderRefusedBeforeItsStart: tool.register's lending stream refused
// by the runtime before the facade sent its start (the facade's Send then
// meets the ended stream: io.EOF) answers the runtime's refusal, forbidden,
// not an internal error. The client waits for the refusal to arrive before
// it hands the stream over, so that the Send always comes after it.
func TestLenderRefusedBeforeItsStart(t *testing.T) {
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	trellisv1.RegisterToolServiceServer(gs, refusingTools{})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	refusedFirst := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err == nil {
			_, _ = s.Header() // returns once the refusal (a trailers-only answer) is in
		}
		return s, err
	}
	cc, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithStreamInterceptor(refusedFirst))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	s := NewServer(Options{Conn: cc, Log: slog.New(slog.DiscardHandler)})
	t.Cleanup(s.Close)
	c := approvingConn(t, s, "o-1", "allow")
	jerr := c.ensureLender(context.Background())
	if !jerr.HasCode(errcode.Forbidden) {
		t.Fatalf("ensureLender = %v, want the runtime's refusal, forbidden", jerr)
	}
}
