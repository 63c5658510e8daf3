package conformance

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

func receipt(principal, op, runner string) store.Receipt {
	return store.Receipt{PrincipalID: principal, OperationID: op, Method: "/trellis.v1.SessionService/Prompt",
		ParamsHash: []byte{1, 2, 3}, SessionID: "s-1", TurnID: "t-1", Runner: runner}
}

func testReceipts(t *testing.T, st store.Store) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		r      store.Receipt
		window time.Duration
	}{
		{"no principal", receipt("", "op-1", "run-a"), time.Hour},
		{"no operation id", receipt("p-1", "", "run-a"), time.Hour},
		{"no runner", receipt("p-1", "op-1", ""), time.Hour},
		{"space in the id", receipt("p-1", "op 1", "run-a"), time.Hour},
		{"id too long", receipt("p-1", string(bytes.Repeat([]byte{'x'}, store.MaxOperationIDLen+1)), "run-a"), time.Hour},
		{"zero window", receipt("p-1", "op-1", "run-a"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := st.BeginReceipt(ctx, tc.r, tc.window)
			wantErr(t, err, store.ErrInvalid)
		})
	}
	_, err := st.GetReceipt(ctx, "p-1", "op-1")
	wantErr(t, err, store.ErrNotFound)

	// The first begin creates; a second (any runner, any params) finds it.
	first, created, err := st.BeginReceipt(ctx, receipt("p-1", "op-1", "run-a"), time.Hour)
	must(t, err)
	if !created || first.State != store.ReceiptStarted || first.Runner != "run-a" || first.TurnID != "t-1" || first.Expired ||
		first.ExpiresAt.Sub(first.StartedAt) != time.Hour || !bytes.Equal(first.ParamsHash, []byte{1, 2, 3}) {
		t.Fatalf("BeginReceipt = %+v, %v", first, created)
	}
	other := receipt("p-1", "op-1", "run-b")
	other.ParamsHash = []byte{9}
	again, created, err := st.BeginReceipt(ctx, other, time.Hour)
	must(t, err)
	if created || again.Runner != "run-a" || !bytes.Equal(again.ParamsHash, []byte{1, 2, 3}) || again.State != store.ReceiptStarted {
		t.Fatalf("second BeginReceipt = %+v, %v; want the first, not created", again, created)
	}
	// Keys are per principal.
	_, created, err = st.BeginReceipt(ctx, receipt("p-2", "op-1", "run-b"), time.Hour)
	must(t, err)
	if !created {
		t.Fatal("another principal's operation op-1 was not created")
	}

	// Only the runner touches and finishes, once.
	wantErr(t, st.TouchReceipt(ctx, "p-1", "op-1", "run-b"), store.ErrNotFound)
	must(t, st.TouchReceipt(ctx, "p-1", "op-1", "run-a"))
	wantErr(t, st.FinishReceipt(ctx, "p-1", "op-1", "run-b", "", []byte("x")), store.ErrNotFound)
	must(t, st.FinishReceipt(ctx, "p-1", "op-1", "run-a", "invalid_params", []byte("outcome")))
	wantErr(t, st.FinishReceipt(ctx, "p-1", "op-1", "run-a", "", []byte("again")), store.ErrNotFound)
	wantErr(t, st.TouchReceipt(ctx, "p-1", "op-1", "run-a"), store.ErrNotFound)
	got, err := st.GetReceipt(ctx, "p-1", "op-1")
	must(t, err)
	if got.State != store.ReceiptDone || got.ErrorCode != "invalid_params" || string(got.Outcome) != "outcome" ||
		got.SessionID != "s-1" || got.TurnID != "t-1" || got.Method != first.Method || !got.StartedAt.Equal(first.StartedAt) || got.Expired {
		t.Fatalf("GetReceipt after finish = %+v", got)
	}
	// A result (no error code) with an empty outcome reads back empty.
	_, _, err = st.BeginReceipt(ctx, receipt("p-1", "op-empty", "run-a"), time.Hour)
	must(t, err)
	must(t, st.FinishReceipt(ctx, "p-1", "op-empty", "run-a", "", nil))
	got, err = st.GetReceipt(ctx, "p-1", "op-empty")
	must(t, err)
	if got.State != store.ReceiptDone || got.ErrorCode != "" || len(got.Outcome) != 0 {
		t.Fatalf("empty result = %+v", got)
	}

	// A released receipt is gone (a repeat begins anew); a done one cannot be released.
	_, _, err = st.BeginReceipt(ctx, receipt("p-1", "op-released", "run-a"), time.Hour)
	must(t, err)
	wantErr(t, st.ReleaseReceipt(ctx, "p-1", "op-released", "run-b"), store.ErrNotFound)
	must(t, st.ReleaseReceipt(ctx, "p-1", "op-released", "run-a"))
	_, err = st.GetReceipt(ctx, "p-1", "op-released")
	wantErr(t, err, store.ErrNotFound)
	wantErr(t, st.ReleaseReceipt(ctx, "p-1", "op-1", "run-a"), store.ErrNotFound)

	// An expired receipt is replaced by the next begin, and swept.
	_, _, err = st.BeginReceipt(ctx, receipt("p-1", "op-short", "run-a"), time.Millisecond)
	must(t, err)
	must(t, st.FinishReceipt(ctx, "p-1", "op-short", "run-a", "", []byte("old")))
	waitExpired(t, st, "p-1", "op-short")
	renewed, created, err := st.BeginReceipt(ctx, receipt("p-1", "op-short", "run-b"), time.Hour)
	must(t, err)
	if !created || renewed.State != store.ReceiptStarted || renewed.Runner != "run-b" || renewed.Outcome != nil {
		t.Fatalf("begin after expiry = %+v, %v; want a new started receipt", renewed, created)
	}
	_, _, err = st.BeginReceipt(ctx, receipt("p-3", "op-gone", "run-a"), time.Millisecond)
	must(t, err)
	waitExpired(t, st, "p-3", "op-gone")
	n, err := st.DeleteExpiredReceipts(ctx)
	must(t, err)
	if n != 1 {
		t.Fatalf("DeleteExpiredReceipts = %d, want 1", n)
	}
	_, err = st.GetReceipt(ctx, "p-3", "op-gone")
	wantErr(t, err, store.ErrNotFound)
	for _, key := range [][2]string{{"p-1", "op-1"}, {"p-2", "op-1"}, {"p-1", "op-short"}} {
		if _, err := st.GetReceipt(ctx, key[0], key[1]); err != nil {
			t.Errorf("live receipt %v swept: %v", key, err)
		}
	}
}

// waitExpired waits until the store judges the receipt expired.
func waitExpired(t *testing.T, st store.Store, principal, op string) {
	t.Helper()
	for {
		r, err := st.GetReceipt(context.Background(), principal, op)
		must(t, err)
		if r.Expired {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// testReceiptRace: of many daemons beginning one operation at once,
// exactly one creates the receipt; the others find it.
func testReceiptRace(t *testing.T, st store.Store) {
	const n = 8
	var wg sync.WaitGroup
	created := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runner := string(rune('a' + i))
			r, ok, err := st.BeginReceipt(context.Background(), receipt("p-1", "op-race", runner), time.Hour)
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				created <- runner
			} else if r.State != store.ReceiptStarted {
				t.Errorf("found receipt %+v", r)
			}
		}()
	}
	wg.Wait()
	close(created)
	var winners []string
	for r := range created {
		winners = append(winners, r)
	}
	if len(winners) != 1 {
		t.Fatalf("runners that created the receipt: %v, want exactly one", winners)
	}
	got, err := st.GetReceipt(context.Background(), "p-1", "op-race")
	must(t, err)
	if got.Runner != winners[0] {
		t.Fatalf("stored runner %s, winner %s", got.Runner, winners[0])
	}
}
