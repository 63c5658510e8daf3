package rpc

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// gRPC answers a request it cannot decode with Internal, which tells the
// client the server broke. strictCodec lets the decode failure through
// (recorded by message) so that an interceptor answers InvalidArgument
// naming the problem: the caller's bytes are wrong, not the server.
type strictCodec struct{ base encoding.CodecV2 }

// undecodable holds the decode error of each message a request could not
// fill, until the interceptor takes it.
var undecodable sync.Map // message pointer → error

func (c strictCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c strictCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if err := c.base.Unmarshal(data, v); err != nil {
		undecodable.Store(v, err)
	}
	return nil
}

func (strictCodec) Name() string { return "proto" }

// decodeOption installs strictCodec for the server.
func decodeOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(strictCodec{base: encoding.GetCodecV2("proto")})
}

func decodeError(m any) error {
	if err, ok := undecodable.LoadAndDelete(m); ok {
		return status.Errorf(codes.InvalidArgument, "the request is not a valid protobuf message for this method: %s", withoutProtoPrefix(err.(error)))
	}
	return nil
}

// withoutProtoPrefix is err's text without the protobuf library's "proto:"
// prefix (whose separator is randomly a space or a no-break space), which
// names a library, not the problem.
func withoutProtoPrefix(err error) string {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "proto:"); ok {
		msg = strings.TrimLeft(rest, " \u00a0")
	}
	return msg
}

// decodeUnary answers InvalidArgument for a request that did not decode.
func decodeUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := decodeError(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// decodeStream does the same for each message a stream receives.
func decodeStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, decodingStream{ss})
}

type decodingStream struct{ grpc.ServerStream }

func (s decodingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		undecodable.Delete(m)
		return err
	}
	return decodeError(m)
}
