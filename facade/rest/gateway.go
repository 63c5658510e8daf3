package rest

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"google.golang.org/grpc/metadata"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"

	"github.com/trellis-run/trellis/facade/methods"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/ws"
)

// New returns the /v1/ handler. cc must NOT carry credentials of its own:
// each request's `Authorization: Bearer <token>` header is checked here and
// forwarded to the runtime, which checks it again. The extra options (such
// as a forward-response hook) apply after the gateway's own.
func New(ctx context.Context, cc grpc.ClientConnInterface, token string, errorHandler runtime.ErrorHandlerFunc, extra ...runtime.ServeMuxOption) (http.Handler, error) {
	opts := []runtime.ServeMuxOption{
		// The facade's codec both ways: REST bodies are JSON-RPC results,
		// REST params are decoded (and refused) as JSON-RPC params.
		runtime.WithMarshalerOption(runtime.MIMEWildcard, Marshaler{}),
		runtime.SetQueryParameterParser(queryParser{}),
		runtime.WithIncomingHeaderMatcher(headerMatcher),
	}
	if errorHandler != nil {
		opts = append(opts, runtime.WithErrorHandler(errorHandler))
	}
	opts = append(opts, runtime.WithRoutingErrorHandler(routingError))
	opts = append(opts, extra...)
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
		func() error {
			return trellisv1.RegisterPrincipalServiceHandlerClient(ctx, mux, trellisv1.NewPrincipalServiceClient(cc))
		},
		func() error {
			return trellisv1.RegisterCheckpointServiceHandlerClient(ctx, mux, trellisv1.NewCheckpointServiceClient(cc))
		},
	} {
		if err := register(); err != nil {
			return nil, err
		}
	}
	return RequireBearer(token, LimitBody(MaxBodyBytes, strictQuery(mux))), nil
}

// strictQuery checks the query string of a GET route as JSON-RPC checks
// params, before the route runs: grpc-gateway itself ignores the query of
// a method whose request has no fields, and unknown parameters of any
// other. An unknown or ill-typed parameter is 400 invalid_params with the
// JSON-RPC message (`unknown field "x" in params of session.list`).
func strictQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.RawQuery != "" {
			name := strings.ReplaceAll(strings.TrimPrefix(r.URL.Path, "/v1/"), "/", ".")
			if m := methods.Lookup(name); m != nil {
				values, err := url.ParseQuery(r.URL.RawQuery)
				if err == nil {
					err = queryParser{}.Parse(m.NewParams(), values, nil)
				} else {
					err = fmt.Errorf("the query string of %s is not valid: %v", name, err)
				}
				if err != nil {
					writeRPCError(w, http.StatusBadRequest, errcode.NewInvalidParams(err.Error()))
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// writeRPCError answers e, the JSON-RPC error object, with HTTP status.
func writeRPCError(w http.ResponseWriter, status int, e *errcode.Error) {
	b, _ := json.Marshal(e)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// MaxBodyBytes caps a REST request body: the same as a WebSocket frame, so
// that no surface accepts more than another.
const MaxBodyBytes = ws.DefaultReadLimit

// bodyLimitKey marks a request whose body went over the cap while read.
type bodyLimitKey struct{}

// LimitBody refuses a request whose body is larger than limit with 413
// payload_too_large: before reading anything when Content-Length says so,
// else as soon as the read passes the limit (a chunked body).
func LimitBody(limit int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			// Not a byte read; the connection closes rather than drain it.
			w.Header().Set("Connection", "close")
			writeTooLarge(w, r.ContentLength, limit)
			return
		}
		over := new(bool)
		r = r.WithContext(context.WithValue(r.Context(), bodyLimitKey{}, over))
		r.Body = &cappedBody{r: http.MaxBytesReader(w, r.Body, limit), over: over}
		next.ServeHTTP(w, r)
	})
}

type cappedBody struct {
	r    io.ReadCloser
	over *bool
}

func (b *cappedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		*b.over = true
	}
	return n, err
}

func (b *cappedBody) Close() error { return b.r.Close() }

// BodyTooLarge reports whether the request of ctx had its body cut at the
// cap (the error handler then answers 413).
func BodyTooLarge(ctx context.Context) bool {
	over, _ := ctx.Value(bodyLimitKey{}).(*bool)
	return over != nil && *over
}

// writeTooLarge answers 413 payload_too_large; size is -1 when unknown.
func writeTooLarge(w http.ResponseWriter, size, limit int64) {
	msg := fmt.Sprintf("the request body is over the limit of %d bytes (the WebSocket frame limit too); send less", limit)
	if size >= 0 {
		msg = fmt.Sprintf("the request body is %d bytes, over the limit of %d bytes (the WebSocket frame limit too); send less", size, limit)
	}
	writeRESTError(w, http.StatusRequestEntityTooLarge, errcode.New(errcode.PayloadTooLarge, "%s", msg).WithData("limit", limit))
}

// writeRESTError answers a REST call the gateway refuses itself with e, as
// the facade renders the runtime's errors: the JSON-RPC error object, its
// numeric code the string code's (PROTOCOL.md §2). HTML characters in the
// message are written as they are.
func writeRESTError(w http.ResponseWriter, status int, e *errcode.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(e)
}

// routingError answers a path no route has (404 not_found) and a path
// whose route wants another HTTP method (405 method_not_found), instead of
// grpc-gateway's 501 not_implemented.
func routingError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, status int) {
	switch status {
	case http.StatusMethodNotAllowed:
		writeRESTError(w, status, errcode.New(errcode.MethodNotFound,
			"%s is not a method of %s; see GET /openapi.json for each route's method", r.Method, r.URL.Path))
	case http.StatusNotFound:
		writeRESTError(w, status, errcode.New(errcode.NotFound, "no REST route %s %s; see GET /openapi.json", r.Method, r.URL.Path))
	default:
		writeRESTError(w, http.StatusBadRequest, errcode.New(errcode.InvalidParams, "bad request for %s %s", r.Method, r.URL.Path))
	}
}

// MDOnBehalfOf is the metadata that names the API key a call made with the
// daemon token is made for (the runtime's rpc.MDOnBehalfOf).
const MDOnBehalfOf = "trellis-on-behalf-of"

// MDIdempotencyKey is the metadata that carries a call's operation id to
// the runtime (runtime/rpc.MDIdempotencyKey): from the JSON-RPC param
// operationId of a mutating method, and from the REST header
// Idempotency-Key.
const MDIdempotencyKey = "idempotency-key"

// headerMatcher passes the REST header Idempotency-Key to the runtime as
// the call's operation id, and every other header as grpc-gateway does.
func headerMatcher(key string) (string, bool) {
	if strings.EqualFold(key, "Idempotency-Key") {
		return MDIdempotencyKey, true
	}
	return runtime.DefaultHeaderMatcher(key)
}

// KeyPrefix starts every API key (the runtime's auth.KeyPrefix).
const KeyPrefix = "trk_"

// RequireBearer answers 401 unless the request carries the daemon token or
// an API key as `Authorization: Bearer <token or key>`. A key is only told
// apart by its shape here: the runtime checks it (and its role) on every
// call, so the request's context carries it as MDOnBehalfOf for handlers
// that call the runtime on the facade's own connection.
func RequireBearer(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		tok = strings.TrimSpace(tok)
		switch {
		case ok && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(tok), []byte(token)) == 1:
		case ok && strings.EqualFold(scheme, "Bearer") && strings.HasPrefix(tok, KeyPrefix):
			r = r.WithContext(metadata.AppendToOutgoingContext(r.Context(), MDOnBehalfOf, tok))
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="trellis"`)
			writeRESTError(w, http.StatusUnauthorized, errcode.New(errcode.Unauthorized,
				"missing or bad token: send Authorization: Bearer <token or API key> (the token is in the daemon's home directory)"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
