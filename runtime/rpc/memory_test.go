package rpc

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/memory"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// serveForTest serves what register adds with the daemon's error mapping
// and returns a connection to it.
func serveForTest(t *testing.T, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	i := interceptors{log: slog.New(slog.DiscardHandler)}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(i.mapErrorsUnary), grpc.ChainStreamInterceptor(i.mapErrorsStream))
	register(gs)
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
	return conn
}

func newMemoryClient(t *testing.T) trellisv1.MemoryServiceClient {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	conn := serveForTest(t, func(s *grpc.Server) {
		trellisv1.RegisterMemoryServiceServer(s, NewMemoryServer(memory.NewService(st), st))
	})
	return trellisv1.NewMemoryServiceClient(conn)
}

func TestMemoryServer(t *testing.T) {
	c := newMemoryClient(t)
	ctx := context.Background()
	ns := func(s string) *string { return &s }
	lim := func(n int32) *int32 { return &n }
	ids := map[string]string{}
	for _, n := range []struct{ key, text, ns string }{
		{"once", "rotate the api key", ""},
		{"twice", "api key api key checklist", ""},
		{"other", "api key of the other team", "team-b"},
	} {
		req := &trellisv1.WriteMemoryRequest{Text: n.text, Tags: []string{"ops"}}
		if n.ns != "" {
			req.Namespace = ns(n.ns)
		}
		resp, err := c.WriteMemory(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		ids[n.key] = resp.GetId()
	}
	resp, err := c.SearchMemory(ctx, &trellisv1.SearchMemoryRequest{Query: "api key"})
	if err != nil {
		t.Fatal(err)
	}
	hits := resp.GetHits()
	if len(hits) != 2 || hits[0].GetId() != ids["twice"] || hits[1].GetId() != ids["once"] ||
		hits[0].GetNamespace() != "default" || hits[0].GetScore() <= hits[1].GetScore() || len(hits[0].GetTags()) != 1 {
		t.Fatalf("hits = %v", hits)
	}
	resp, err = c.SearchMemory(ctx, &trellisv1.SearchMemoryRequest{Query: "api", Namespace: ns("team-b"), Limit: lim(5)})
	if err != nil || len(resp.GetHits()) != 1 || resp.GetHits()[0].GetId() != ids["other"] {
		t.Fatalf("team-b hits = %v, %v", resp.GetHits(), err)
	}

	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"empty text", func() error { _, err := c.WriteMemory(ctx, &trellisv1.WriteMemoryRequest{}); return err }},
		{"empty tag", func() error {
			_, err := c.WriteMemory(ctx, &trellisv1.WriteMemoryRequest{Text: "x", Tags: []string{""}})
			return err
		}},
		{"empty query", func() error { _, err := c.SearchMemory(ctx, &trellisv1.SearchMemoryRequest{}); return err }},
		{"limit 0", func() error {
			_, err := c.SearchMemory(ctx, &trellisv1.SearchMemoryRequest{Query: "x", Limit: lim(0)})
			return err
		}},
		{"limit 1000", func() error {
			_, err := c.SearchMemory(ctx, &trellisv1.SearchMemoryRequest{Query: "x", Limit: lim(1000)})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantStatus(t, tc.call(), codes.InvalidArgument, "invalid_params")
		})
	}
}
