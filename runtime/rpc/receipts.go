package rpc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	spb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
)

// MDIdempotencyKey is the metadata that carries a call's operation id
// (docs/protocol.md, "Operation ids"): gRPC callers set it themselves, the
// facade sets it from the JSON-RPC param operationId and from the REST
// header Idempotency-Key.
const MDIdempotencyKey = "idempotency-key"

// Defaults of ReceiptOptions.
const (
	DefaultOperationWindow = 24 * time.Hour
	defaultTouchEvery      = 2 * time.Second
	defaultPollEvery       = 100 * time.Millisecond
	// staleTouches: a started receipt of another runner untouched for
	// this many TouchEvery has an unknown outcome (its daemon stopped).
	staleTouches = 5
	// sweepMin and sweepMax bound how often expired receipts are swept.
	sweepMin = time.Second
	sweepMax = 10 * time.Minute
)

// ReceiptOptions configure Receipts.
type ReceiptOptions struct {
	Store store.ReceiptStore
	// Window is how long a receipt lives, from the first call.
	Window time.Duration
	// Runner identifies this daemon process, new at every start.
	Runner string
	// Sole: no other daemon uses the store (SQLite, one daemon per home),
	// so a started receipt of another runner was left by a previous run
	// of this daemon, which stopped before it stored the outcome.
	Sole bool
	// TouchEvery is how often a running call says so in its receipt
	// (see staleTouches). Zero: defaultTouchEvery.
	TouchEvery time.Duration
	Log        *slog.Logger
}

// Receipts runs each mutating call that carries an operation id once per
// (principal, operation id) within the window: the first call's outcome is
// kept in the store, and a repeat answers it (waiting for the first while
// it runs, here or on another daemon) instead of acting again.
type Receipts struct {
	ReceiptOptions

	mu      sync.Mutex
	running map[receiptKey]chan struct{} // this runner's calls in progress (claim); closed when stored
}

type receiptKey struct{ principal, operation string }

// NewReceipts returns the receipt keeper.
func NewReceipts(o ReceiptOptions) *Receipts {
	if o.Window <= 0 {
		o.Window = DefaultOperationWindow
	}
	if o.TouchEvery <= 0 {
		o.TouchEvery = defaultTouchEvery
	}
	return &Receipts{ReceiptOptions: o, running: map[receiptKey]chan struct{}{}}
}

// Sweep deletes the expired receipts every window (within sweepMin and
// sweepMax) until ctx ends.
func (r *Receipts) Sweep(ctx context.Context) {
	every(ctx, min(max(r.Window, sweepMin), sweepMax), func() {
		if _, err := r.Store.DeleteExpiredReceipts(ctx); err != nil && ctx.Err() == nil {
			r.Log.Warn("sweep the expired operation receipts", "err", err)
		}
	})
}

// every calls fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}

// retryCodes are the errors that say nothing was done and to try again:
// such an outcome is not kept, so that a retry with the same operation id
// acts.
var retryCodes = map[string]bool{
	errcode.Overloaded: true, errcode.StoreUnavailable: true, errcode.StoreBusy: true, errcode.RateLimited: true,
	errcode.SessionBusy: true, // whenBusy reject, or a full queue: later the session takes it
}

func (r *Receipts) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if r == nil || !authzTable[info.FullMethod].mutating {
		return h(ctx, req)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	id := first(md, MDIdempotencyKey)
	if id == "" {
		return h(ctx, req)
	}
	if err := store.CheckOperationID(id); err != nil {
		return nil, errs.New(errcode.InvalidParams, "operationId: %s", strings.TrimSuffix(err.Error(), ": "+store.ErrInvalid.Error())).
			WithData("field", "operationId")
	}
	p, ok := auth.PrincipalFrom(ctx)
	msg, isMsg := req.(proto.Message)
	if !ok || !isMsg {
		return h(ctx, req)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	want := store.Receipt{PrincipalID: p.ID, OperationID: id, Method: info.FullMethod, ParamsHash: sum[:],
		SessionID: sessionIDOf(req), Runner: r.Runner}
	if want.SessionID != "" && answersTurnID(info.FullMethod) {
		// The turn the call may start gets its id now, kept in the
		// receipt: an unknown outcome can name it.
		want.TurnID = ids.New("t")
	}
	cred := callerCredential(md)
	k := receiptKey{p.ID, id}
	for {
		mine, other := r.claim(k)
		if other != nil {
			// A call of this runner with the id runs: once it stored its
			// outcome (or released the receipt), look again.
			select {
			case <-other:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		// Not cancelled with the call: a receipt the store began for a
		// caller that went away is acted on (as act does) rather than left
		// started with nothing running it.
		got, created, err := r.Store.BeginReceipt(context.WithoutCancel(ctx), want, r.Window)
		if err == nil && created {
			if got.TurnID != "" {
				ctx = session.WithTurnID(ctx, got.TurnID)
			}
			return r.act(ctx, got, mine, req, info, h, cred)
		}
		r.unclaim(k, mine)
		if err != nil {
			return nil, err
		}
		if got.Method != want.Method || !bytes.Equal(got.ParamsHash, want.ParamsHash) {
			return nil, errs.New(errcode.InvalidParams,
				"operationId %q was used at %s by a call of %s with other params; a repeat must send the same params, a new operation a new operationId",
				id, got.StartedAt.Format(time.RFC3339Nano), methodName(got.Method)).
				WithData("field", "operationId").WithData("operationId", id).WithData("method", methodName(got.Method))
		}
		resp, err, again := r.await(ctx, got, cred)
		if !again {
			return resp, err
		}
	}
}

// claim marks operation k as taken by a call of this runner, from before
// its receipt is begun until its outcome is stored (unclaim): so a
// duplicate reaching this runner meanwhile waits for it (other, closed
// when it ends) rather than finding a started receipt of this runner that
// nothing runs, which would be a lost outcome.
func (r *Receipts) claim(k receiptKey) (mine, other chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.running[k]; c != nil {
		return nil, c
	}
	mine = make(chan struct{})
	r.running[k] = mine
	return mine, nil
}

// unclaim ends claim's mark.
func (r *Receipts) unclaim(k receiptKey, mine chan struct{}) {
	r.mu.Lock()
	delete(r.running, k)
	r.mu.Unlock()
	close(mine)
}

// act runs the call whose receipt this runner began (and claimed: mine)
// and stores its outcome (sealed for cred when it shows a credential once,
// see receipts_sealed.go). The call runs to its end even if its caller
// goes away, so that a retry finds the outcome.
func (r *Receipts) act(ctx context.Context, rc store.Receipt, mine chan struct{}, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler, cred string) (any, error) {
	defer r.unclaim(receiptKey{rc.PrincipalID, rc.OperationID}, mine)
	ctx = context.WithoutCancel(ctx)
	stop := r.touch(ctx, rc)
	resp, err := h(ctx, req)
	stop()
	var (
		outcome []byte
		code    string
	)
	if err != nil {
		err = toStatus(ctx, r.Log, info.FullMethod, err)
		code = errorCodeOf(err)
		if retryCodes[code] {
			if rerr := r.Store.ReleaseReceipt(ctx, rc.PrincipalID, rc.OperationID, r.Runner); rerr != nil {
				r.Log.Warn("release the receipt of a call that did nothing", "operationId", rc.OperationID, "err", rerr)
			}
			return nil, err
		}
		outcome, _ = proto.Marshal(status.Convert(err).Proto())
	} else if m, ok := resp.(proto.Message); ok {
		if outcome, err = proto.Marshal(m); err != nil {
			return nil, err
		}
		if shownOnce(m.ProtoReflect().Descriptor()) {
			if outcome, err = sealOutcome(cred, rc.OperationID, outcome); err != nil {
				return nil, err
			}
		}
	}
	if ferr := r.Store.FinishReceipt(ctx, rc.PrincipalID, rc.OperationID, r.Runner, code, outcome); ferr != nil {
		// The call acted: its caller gets its answer; a repeat answers
		// operation_outcome_unknown.
		r.Log.Error("store the outcome of an operation", "operationId", rc.OperationID, "method", info.FullMethod, "err", ferr)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// touch says every TouchEvery that this runner still runs the call, until
// the returned stop is called.
func (r *Receipts) touch(ctx context.Context, rc store.Receipt) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		every(ctx, r.TouchEvery, func() {
			if err := r.Store.TouchReceipt(ctx, rc.PrincipalID, rc.OperationID, r.Runner); err != nil && ctx.Err() == nil {
				r.Log.Warn("touch an operation's receipt", "operationId", rc.OperationID, "err", err)
			}
		})
	}()
	return func() { cancel(); wg.Wait() }
}

// await answers a repeat: the stored outcome once the first call is done.
// again is true when the receipt expired meanwhile (the repeat then acts
// as a new operation).
func (r *Receipts) await(ctx context.Context, rc store.Receipt, cred string) (resp any, err error, again bool) {
	k := receiptKey{rc.PrincipalID, rc.OperationID}
	for {
		switch {
		case rc.State == store.ReceiptDone:
			resp, err := r.replay(rc, cred)
			return resp, err, false
		case rc.Expired:
			return nil, nil, true
		}
		r.mu.Lock()
		running := r.running[k]
		r.mu.Unlock()
		var wait <-chan struct{}
		switch {
		case rc.Runner == r.Runner && running != nil:
			wait = running
		case rc.Runner == r.Runner:
			// Not running here: look once more (it may have finished
			// between the read and the look), then it is lost.
			cur, err := r.Store.GetReceipt(ctx, rc.PrincipalID, rc.OperationID)
			if err == nil && cur.State == store.ReceiptStarted && cur.Runner == r.Runner {
				return nil, unknownOutcome(cur), false
			}
		case r.Sole || rc.Idle > staleTouches*r.TouchEvery:
			return nil, unknownOutcome(rc), false
		default:
			// Another daemon runs it: poll its receipt.
			t := time.NewTimer(defaultPollEvery)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err(), false
			}
		}
		if wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, ctx.Err(), false
			}
		}
		cur, err := r.Store.GetReceipt(ctx, rc.PrincipalID, rc.OperationID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// Swept, or released (the first call did nothing): act.
			return nil, nil, true
		case err != nil:
			return nil, err, false
		}
		rc = cur
	}
}

// replay rebuilds a done receipt's answer for a repeat made with cred.
func (r *Receipts) replay(rc store.Receipt, cred string) (any, error) {
	if rc.ErrorCode != "" {
		var st spb.Status
		if err := proto.Unmarshal(rc.Outcome, &st); err != nil {
			return nil, fmt.Errorf("operation %s: read the stored error: %w", rc.OperationID, err)
		}
		return nil, status.ErrorProto(&st)
	}
	resp, err := newResponse(rc.Method)
	if err != nil {
		return nil, err
	}
	outcome := rc.Outcome
	if shownOnce(resp.ProtoReflect().Descriptor()) {
		if outcome, err = openOutcome(cred, rc.OperationID, outcome); err != nil {
			return nil, errs.New(errcode.InvalidParams,
				"operation %q (%s) was done, and its result shows a credential only to the key or token that made the first call: repeat it with that one, or use a new operationId",
				rc.OperationID, methodName(rc.Method)).WithData("field", "operationId").WithData("operationId", rc.OperationID)
		}
	}
	if err := proto.Unmarshal(outcome, resp); err != nil {
		return nil, fmt.Errorf("operation %s: read the stored result: %w", rc.OperationID, err)
	}
	return resp, nil
}

// unknownOutcome is the answer to a repeat of a call whose daemon stopped
// after it began acting and before it stored the outcome.
func unknownOutcome(rc store.Receipt) error {
	e := errs.New(errcode.OperationOutcomeUnknown,
		"the outcome of operation %q (%s, begun at %s) is unknown: the daemon that acted on it stopped before storing its outcome, so it may or may not have acted; it will not act again under this operationId",
		rc.OperationID, methodName(rc.Method), rc.StartedAt.Format(time.RFC3339Nano)).
		WithData("operationId", rc.OperationID).WithData("method", methodName(rc.Method)).
		WithData("startedAt", rc.StartedAt.Format(time.RFC3339Nano))
	if rc.SessionID != "" {
		e = e.WithData("sessionId", rc.SessionID)
	}
	if rc.TurnID != "" {
		e = e.WithData("turnId", rc.TurnID)
	}
	return e
}

// answersTurnID reports whether method's result names a turn (a string
// turn_id that is always set): the turn the call starts, or the running
// one it joined.
func answersTurnID(method string) bool {
	resp, err := newResponse(method)
	if err != nil {
		return false
	}
	fd := resp.ProtoReflect().Descriptor().Fields().ByName("turn_id")
	return fd != nil && fd.Kind() == protoreflect.StringKind && !fd.HasPresence()
}
