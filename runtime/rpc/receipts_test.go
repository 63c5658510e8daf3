package rpc

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// slowBeginStore holds the first BeginReceipt that creates a receipt
// until the second BeginReceipt comes, or until a second passed.
type slowBeginStore struct {
	store.Store
	begun  atomic.Int32
	second chan struct{}
}

func (s *slowBeginStore) BeginReceipt(ctx context.Context, r store.Receipt, window time.Duration) (store.Receipt, bool, error) {
	got, created, err := s.Store.BeginReceipt(ctx, r, window)
	switch s.begun.Add(1) {
	case 1:
		select {
		case <-s.second:
		case <-time.After(time.Second):
		}
	case 2:
		close(s.second)
	}
	return got, created, err
}

// TestReceiptsDuplicateWhileBeginning: a duplicate reaching the daemon
// while the first call is between beginning its receipt and acting waits
// for the first call's outcome; it does not take the started receipt, that
// nothing would seem to run yet, for a lost one (operation_outcome_unknown).
func TestReceiptsDuplicateWhileBeginning(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	slow := &slowBeginStore{Store: st, second: make(chan struct{})}
	r := NewReceipts(ReceiptOptions{Store: slow, Runner: "run-1", Log: slog.New(slog.DiscardHandler)})
	var acted atomic.Int32
	h := func(context.Context, any) (any, error) {
		acted.Add(1)
		return &trellisv1.PromptResponse{TurnId: "t-1"}, nil
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/trellis.v1.SessionService/Prompt"}
	ctx := metadata.NewIncomingContext(auth.WithPrincipal(context.Background(), auth.Builtin()), metadata.Pairs(MDIdempotencyKey, "op-1"))
	req := &trellisv1.PromptRequest{SessionId: "s-1", Text: "hi"}
	type answer struct {
		resp any
		err  error
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			resp, err := r.unary(ctx, req, info, h)
			answers <- answer{resp, err}
		}()
	}
	for range 2 {
		a := <-answers
		if a.err != nil {
			t.Fatalf("a duplicate answered %v (%s)", a.err, errs.CodeOf(a.err))
		}
		if id := a.resp.(*trellisv1.PromptResponse).GetTurnId(); id != "t-1" {
			t.Fatalf("turn %q, want t-1", id)
		}
	}
	if n := acted.Load(); n != 1 {
		t.Fatalf("the call acted %d times, want once", n)
	}
}

// cancelledBeginStore begins receipts whatever ctx says, then answers
// ctx's error when it is cancelled: as PostgreSQL may when a call's
// context ends while its insert commits.
type cancelledBeginStore struct{ store.Store }

func (s cancelledBeginStore) BeginReceipt(ctx context.Context, r store.Receipt, window time.Duration) (store.Receipt, bool, error) {
	got, created, err := s.Store.BeginReceipt(context.WithoutCancel(ctx), r, window)
	if ctx.Err() != nil {
		return store.Receipt{}, false, ctx.Err()
	}
	return got, created, err
}

// TestReceiptsCallerGoneWhileBeginning: a call whose caller went away (a
// forwarding daemon killed) as its receipt was begun still acts and
// stores its outcome, which a repeat answers; its receipt is not left
// started with nothing running it (operation_outcome_unknown).
func TestReceiptsCallerGoneWhileBeginning(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	r := NewReceipts(ReceiptOptions{Store: cancelledBeginStore{st}, Runner: "run-1", Log: slog.New(slog.DiscardHandler)})
	var acted atomic.Int32
	h := func(context.Context, any) (any, error) {
		acted.Add(1)
		return &trellisv1.PromptResponse{TurnId: "t-1"}, nil
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/trellis.v1.SessionService/Prompt"}
	ctx := metadata.NewIncomingContext(auth.WithPrincipal(context.Background(), auth.Builtin()), metadata.Pairs(MDIdempotencyKey, "op-1"))
	req := &trellisv1.PromptRequest{SessionId: "s-1", Text: "hi"}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = r.unary(gone, req, info, h)
	resp, err := r.unary(ctx, req, info, h)
	if err != nil {
		t.Fatalf("the repeat answered %v (%s)", err, errs.CodeOf(err))
	}
	if id := resp.(*trellisv1.PromptResponse).GetTurnId(); id != "t-1" || acted.Load() != 1 {
		t.Fatalf("turn %q after %d actions, want t-1 after one", id, acted.Load())
	}
}
