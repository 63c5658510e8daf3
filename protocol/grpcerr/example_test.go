package grpcerr_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/grpcerr"
)

// A gRPC status the runtime built carries the Trellis ErrorInfo: its
// reason becomes data.code and its metadata the rest of data (numbers as
// numbers). A status without one is mapped by its gRPC code.
func ExampleMapper_FromError() {
	m := &grpcerr.Mapper{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	st, err := status.New(codes.ResourceExhausted, "the session's queue is full").WithDetails(&errdetails.ErrorInfo{
		Reason: errcode.Overloaded, Domain: errcode.Domain,
		Metadata: map[string]string{"retryAfterMs": "250", "sessionId": "s-1"},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, err := range []error{st.Err(), status.Error(codes.NotFound, "no session s-9")} {
		b, _ := json.Marshal(m.FromError(context.Background(), err))
		fmt.Println(string(b))
	}
	// Output:
	// {"code":-32001,"message":"the session's queue is full","data":{"code":"overloaded","retryAfterMs":250,"sessionId":"s-1"}}
	// {"code":-32004,"message":"no session s-9","data":{"code":"not_found"}}
}

// An error that is no gRPC status (a bug, a driver's error) is masked: the
// client gets an error id, the log gets the error under that id.
func ExampleMapper_Internal() {
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	m := &grpcerr.Mapper{
		Log:        slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: noTime})),
		NewErrorID: func() string { return "e-0000000000000001" },
	}
	e := m.FromError(context.Background(), errors.New("pq: relation \"sessions\" does not exist"))
	b, _ := json.Marshal(e)
	fmt.Println(string(b))
	// Output:
	// level=ERROR msg="internal error" errorId=e-0000000000000001 error="pq: relation \"sessions\" does not exist"
	// {"code":-32603,"message":"internal error (id e-0000000000000001)","data":{"code":"internal","errorId":"e-0000000000000001"}}
}
