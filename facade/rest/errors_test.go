package rest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
)

// TestGatewayErrorsAreJSONRPCs: the errors the REST gateway answers itself
// (no token, no route, the wrong HTTP method, a body over the cap) are
// JSON-RPC error objects whose numeric code is their string code's, as the
// runtime's errors are rendered; messages keep their < and >.
func TestGatewayErrorsAreJSONRPCs(t *testing.T) {
	bearer := RequireBearer("secret-token", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("a request without the token reached the handler")
	}))
	tests := []struct {
		name       string
		serve      func(w http.ResponseWriter, r *http.Request)
		method     string
		wantStatus int
		wantCode   string
		wantText   string
	}{
		{"no token", bearer.ServeHTTP, http.MethodGet, http.StatusUnauthorized, errcode.Unauthorized, "Bearer <token or API key>"},
		{"no route", func(w http.ResponseWriter, r *http.Request) {
			routingError(r.Context(), nil, nil, w, r, http.StatusNotFound)
		},
			http.MethodGet, http.StatusNotFound, errcode.NotFound, "no REST route GET /v1/nowhere"},
		{"wrong method", func(w http.ResponseWriter, r *http.Request) {
			routingError(r.Context(), nil, nil, w, r, http.StatusMethodNotAllowed)
		}, http.MethodDelete, http.StatusMethodNotAllowed, errcode.MethodNotFound, "DELETE is not a method of /v1/nowhere"},
		{"body over the cap", func(w http.ResponseWriter, _ *http.Request) { writeTooLarge(w, 10, 5) },
			http.MethodPost, http.StatusRequestEntityTooLarge, errcode.PayloadTooLarge, "10 bytes, over the limit of 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tt.serve(rec, httptest.NewRequest(tt.method, "/v1/nowhere", nil))
			if rec.Code != tt.wantStatus || rec.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("status %d, content type %q; want %d, application/json", rec.Code, rec.Header().Get("Content-Type"), tt.wantStatus)
			}
			body := rec.Body.String()
			var e errcode.Error
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("%s: %v", body, err)
			}
			want, _ := errcode.Numeric(tt.wantCode)
			if e.StringCode() != tt.wantCode || e.Code != want {
				t.Errorf("error %s: want data.code %s and code %d", body, tt.wantCode, want)
			}
			if !strings.Contains(body, tt.wantText) {
				t.Errorf("error %s does not say %q", body, tt.wantText)
			}
		})
	}
}
