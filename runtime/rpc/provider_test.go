package rpc

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/provider"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// newProviderClient serves ProviderService over a real SQLite store with the
// daemon's error mapping, and returns a client of it.
func newProviderClient(t *testing.T) trellisv1.ProviderServiceClient {
	t.Helper()
	home := t.TempDir()
	st, err := sqlite.Open(filepath.Join(home, "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	svc, err := provider.New(context.Background(), provider.Options{Home: home, Settings: st, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	i := interceptors{log: slog.New(slog.DiscardHandler)}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(i.mapErrorsUnary))
	trellisv1.RegisterProviderServiceServer(gs, NewProviderServer(svc))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return trellisv1.NewProviderServiceClient(conn)
}

func reasonOf(err error) (codes.Code, string) {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), info.Reason
		}
	}
	return st.Code(), ""
}

func TestProviderServer(t *testing.T) {
	const key = "sk-rpc-SECRETSECRET"
	c := newProviderClient(t)
	ctx := context.Background()
	str := func(s string) *string { return &s }
	yes := true

	for _, tc := range []struct {
		name   string
		req    *trellisv1.ConfigureProviderRequest
		code   codes.Code
		reason string
	}{
		{"unknown vendor", &trellisv1.ConfigureProviderRequest{Vendor: "gemini", Config: &trellisv1.ProviderConfig{ApiKey: str("k")}},
			codes.NotFound, "not_found"},
		{"no vendor", &trellisv1.ConfigureProviderRequest{Config: &trellisv1.ProviderConfig{ApiKey: str("k")}}, codes.InvalidArgument, "invalid_params"},
		{"no config", &trellisv1.ConfigureProviderRequest{Vendor: "openai"}, codes.InvalidArgument, "invalid_params"},
		{"empty config", &trellisv1.ConfigureProviderRequest{Vendor: "openai", Config: &trellisv1.ProviderConfig{}}, codes.InvalidArgument, "invalid_params"},
		{"bad base_url", &trellisv1.ConfigureProviderRequest{Vendor: "openai", Config: &trellisv1.ProviderConfig{BaseUrl: str("nope")}},
			codes.InvalidArgument, "invalid_params"},
	} {
		_, err := c.ConfigureProvider(ctx, tc.req)
		if code, reason := reasonOf(err); code != tc.code || reason != tc.reason {
			t.Errorf("%s: %v (%v %q), want %v %q", tc.name, err, code, reason, tc.code, tc.reason)
		}
	}

	resp, err := c.ConfigureProvider(ctx, &trellisv1.ConfigureProviderRequest{Vendor: "openai", Config: &trellisv1.ProviderConfig{
		ApiKey: str(key), BaseUrl: str("http://127.0.0.1:9/v1"), Model: str("qwen3-coder"), Models: []string{"qwen3-coder", "llama3.1"}, IsDefault: &yes}})
	if err != nil || !resp.GetOk() {
		t.Fatalf("configure: %v %v", resp, err)
	}
	list, err := c.ListProviders(ctx, &trellisv1.ListProvidersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := protojson.Marshal(list); strings.Contains(string(raw), "SECRET") {
		t.Fatalf("provider.list shows the key: %s", raw)
	}
	if len(list.GetProviders()) != 3 {
		t.Fatalf("providers %v", list.GetProviders())
	}
	o := list.GetProviders()[0]
	if o.GetVendor() != "openai" || !o.GetConfigured() || !o.GetIsDefault() || o.GetDefaultModel() != "qwen3-coder" ||
		o.GetBaseUrl() != "http://127.0.0.1:9/v1" || strings.Join(o.GetModels(), ",") != "qwen3-coder,llama3.1" ||
		strings.Join(o.GetAuthMethods(), ",") != "api_key" {
		t.Errorf("openai = %v", o)
	}
	if f := list.GetProviders()[2]; f.GetVendor() != "fake" || f.GetIsDefault() || !f.GetConfigured() {
		t.Errorf("fake = %v", f)
	}

	_, err = c.LoginWeb(ctx, &trellisv1.LoginWebRequest{Vendor: "anthropic", Method: "browser"})
	if code, reason := reasonOf(err); code != codes.FailedPrecondition || reason != "login_unsupported" {
		t.Errorf("loginWeb: %v", err)
	}
	_, err = c.LoginWeb(ctx, &trellisv1.LoginWebRequest{Vendor: "nope"})
	if _, reason := reasonOf(err); reason != "not_found" {
		t.Errorf("loginWeb unknown: %v", err)
	}
}
