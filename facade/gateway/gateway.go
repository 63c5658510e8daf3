package gateway

import (
	"context"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/auth"
)

// New returns the /v1/ handler. cc must NOT carry credentials of its own:
// each request's `Authorization: Bearer <token>` header is checked here and
// forwarded to the runtime, which checks it again.
func New(ctx context.Context, cc grpc.ClientConnInterface, token string, errorHandler runtime.ErrorHandlerFunc) (http.Handler, error) {
	opts := []runtime.ServeMuxOption{
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
	}
	if errorHandler != nil {
		opts = append(opts, runtime.WithErrorHandler(errorHandler))
	}
	mux := runtime.NewServeMux(opts...)
	for _, register := range []func() error{
		func() error {
			return trellisv1.RegisterSystemServiceHandlerClient(ctx, mux, trellisv1.NewSystemServiceClient(cc))
		},
		func() error {
			return trellisv1.RegisterSessionServiceHandlerClient(ctx, mux, trellisv1.NewSessionServiceClient(cc))
		},
		func() error {
			return trellisv1.RegisterToolServiceHandlerClient(ctx, mux, trellisv1.NewToolServiceClient(cc))
		},
		func() error {
			return trellisv1.RegisterApprovalServiceHandlerClient(ctx, mux, trellisv1.NewApprovalServiceClient(cc))
		},
		func() error {
			return trellisv1.RegisterJobServiceHandlerClient(ctx, mux, trellisv1.NewJobServiceClient(cc))
		},
		func() error {
			return trellisv1.RegisterProviderServiceHandlerClient(ctx, mux, trellisv1.NewProviderServiceClient(cc))
		},
		func() error {
			return trellisv1.RegisterAgentServiceHandlerClient(ctx, mux, trellisv1.NewAgentServiceClient(cc))
		},
		func() error {
			return trellisv1.RegisterGatewayServiceHandlerClient(ctx, mux, trellisv1.NewGatewayServiceClient(cc))
		},
		func() error {
			return trellisv1.RegisterMemoryServiceHandlerClient(ctx, mux, trellisv1.NewMemoryServiceClient(cc))
		},
		func() error {
			return trellisv1.RegisterSkillServiceHandlerClient(ctx, mux, trellisv1.NewSkillServiceClient(cc))
		},
		func() error {
			return trellisv1.RegisterBackendServiceHandlerClient(ctx, mux, trellisv1.NewBackendServiceClient(cc))
		},
	} {
		if err := register(); err != nil {
			return nil, err
		}
	}
	return RequireBearer(token, mux), nil
}

// RequireBearer answers 401 unless the request carries the daemon token as
// `Authorization: Bearer <token>`.
func RequireBearer(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || !auth.Equal(strings.TrimSpace(tok), token) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("WWW-Authenticate", `Bearer realm="trellis"`)
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"code":-32000,"message":"missing or bad token: send Authorization: Bearer <token> (the token is in the daemon's home directory)","data":{"code":"unauthorized"}}` + "\n"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
