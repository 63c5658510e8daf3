package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// TestErrorTableCoversEveryCode checks that every string code declared in
// trellis.v1.ErrorCode maps to a gRPC status whose ErrorInfo reason is that
// code, with the message kept (internal masked).
func TestErrorTableCoversEveryCode(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	values := trellisv1.ErrorCode(0).Descriptor().Values()
	seen := 0
	for i := 0; i < values.Len(); i++ {
		info, _ := proto.GetExtension(values.Get(i).Options(), trellisv1.E_Error).(*trellisv1.ErrorCodeInfo)
		if info == nil || info.GetCode() == "" {
			continue
		}
		code := info.GetCode()
		seen++
		t.Run(code, func(t *testing.T) {
			want, ok := errcode.GRPC(code)
			if !ok {
				t.Fatalf("code %s has no gRPC code in the table", code)
			}
			err := toStatus(context.Background(), log, "/x/Y", errs.New(code, "something about %s", code).WithData("status", 429))
			st, _ := status.FromError(err)
			if st.Code() != codes.Code(want) {
				t.Errorf("gRPC code %v, want %v", st.Code(), want)
			}
			var reason string
			var md map[string]string
			for _, d := range st.Details() {
				if ei, ok := d.(*errdetails.ErrorInfo); ok {
					reason, md = ei.GetReason(), ei.GetMetadata()
				}
			}
			if reason != code {
				t.Errorf("ErrorInfo reason %q, want %q", reason, code)
			}
			if code == errcode.Internal {
				if strings.Contains(st.Message(), "something") || md["errorId"] == "" {
					t.Errorf("internal error not masked: %q %v", st.Message(), md)
				}
			} else if st.Message() != "something about "+code || md["status"] != "429" {
				t.Errorf("message %q metadata %v", st.Message(), md)
			}
		})
	}
	if seen != len(errcode.Codes()) {
		t.Errorf("the proto declares %d codes, the table maps %d", seen, len(errcode.Codes()))
	}
}

func TestToStatusMasksPlainErrors(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, err := range []error{errors.New("disk on fire at /secret/path"), fmt.Errorf("wrapped: %w", io.ErrUnexpectedEOF)} {
		st, _ := status.FromError(toStatus(context.Background(), log, "/x/Y", err))
		if st.Code() != codes.Internal || strings.Contains(st.Message(), "secret") || strings.Contains(st.Message(), "EOF") {
			t.Errorf("%v → %v %q", err, st.Code(), st.Message())
		}
	}
	st, _ := status.FromError(toStatus(context.Background(), log, "/x/Y", context.Canceled))
	if st.Code() != codes.Canceled {
		t.Errorf("context.Canceled → %v", st.Code())
	}
}

// TestToStatusClipsHugeMessages: an error quoting a huge input (a 10 MB
// workdir) keeps its code and data keys, with message and values cut to a
// size every client's header limit takes.
func TestToStatusClipsHugeMessages(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	huge := strings.Repeat("é", 5<<20) // 10 MB of two-byte runes
	st, _ := status.FromError(toStatus(context.Background(), log, "/x/Y",
		errs.New(errcode.InvalidParams, "workdir %s does not exist", huge).WithData("field", huge)))
	if st.Code() != codes.InvalidArgument || len(st.Message()) > maxErrorText+64 || !utf8.ValidString(st.Message()) ||
		!strings.HasPrefix(st.Message(), "workdir éé") || !strings.Contains(st.Message(), "more bytes cut)") {
		t.Fatalf("status %v, message of %d bytes", st.Code(), len(st.Message()))
	}
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	if info == nil || info.Reason != errcode.InvalidParams || len(info.Metadata["field"]) > maxErrorText+64 {
		t.Fatalf("ErrorInfo %v", info)
	}
}
