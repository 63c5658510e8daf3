package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/facade"
)

const subscribeSessions = "/trellis.v1.SessionService/SubscribeSessions"

// runtimeConn is a facade's connection to a daemon's gRPC port that can
// break the multiplexed stream on demand.
type runtimeConn struct {
	*grpc.ClientConn
	token string

	muxOpens, subscribes atomic.Int32
	mu                   sync.Mutex
	cancels              []context.CancelFunc // of the open multiplexed streams
}

func (r *runtimeConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+r.token)
	switch method {
	case subscribeSessions:
		r.muxOpens.Add(1)
		ctx, cancel := context.WithCancel(ctx)
		r.mu.Lock()
		r.cancels = append(r.cancels, cancel)
		r.mu.Unlock()
		return r.ClientConn.NewStream(ctx, desc, method, opts...)
	case "/trellis.v1.SessionService/Subscribe":
		r.subscribes.Add(1)
	}
	return r.ClientConn.NewStream(ctx, desc, method, opts...)
}

func (r *runtimeConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+r.token)
	return r.ClientConn.Invoke(ctx, method, args, reply, opts...)
}

// breakStreams cancels every multiplexed stream opened so far.
func (r *runtimeConn) breakStreams() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cancel := range r.cancels {
		cancel()
	}
	r.cancels = nil
}

// startSplitFacade serves a facade of its own over the daemon's gRPC port.
func startSplitFacade(t *testing.T, d *daemon.Daemon) (*runtimeConn, *wsClient) {
	t.Helper()
	cc, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	rc := &runtimeConn{ClientConn: cc, token: d.Token()}
	f := facade.NewServer(facade.Options{Conn: rc, RESTConn: rc, Token: d.Token()})
	srv := httptest.NewServer(f.Handler())
	t.Cleanup(func() { srv.Close(); f.Close() })
	c := dialWSURL(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws")
	if err := c.Call(context.Background(), "system.hello", map[string]any{
		"token": d.Token(), "clientVersion": "test", "protocolVersion": "1.0.0",
	}, nil); err != nil {
		t.Fatalf("hello: %v", err)
	}
	return rc, c
}

// When the multiplexed stream fails, the sessions watched on it go on (each
// watcher reads on its own from where it is: no gap, no duplicate, which
// the client checks), and the next watch opens a new multiplexed stream.
func TestHubSurvivesItsStreamFailing(t *testing.T) {
	d := startDaemon(t)
	rc, c := startSplitFacade(t, d)
	a := createSession(t, c, nil)
	var gotA []map[string]any // every event of a the connection received
	gotA = append(gotA, promptComplete(t, c, a, "hello")...)
	if n := rc.muxOpens.Load(); n != 1 || rc.subscribes.Load() != 0 {
		t.Fatalf("%d multiplexed streams and %d Subscribe, want 1 and 0", n, rc.subscribes.Load())
	}
	rc.breakStreams()
	gotA = append(gotA, promptComplete(t, c, a, "hello again")...)
	b := createSession(t, c, nil)
	promptComplete(t, c, b, "hello")
	// A new watch opens a new multiplexed stream.
	deadline := time.Now().Add(30 * time.Second)
	for rc.muxOpens.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // a bounded poll: the facade notices the failure on its own
		id := createSession(t, c, nil)
		promptComplete(t, c, id, "hello")
	}
	if n := rc.muxOpens.Load(); n < 2 {
		t.Fatalf("no new multiplexed stream after the first failed (%d opened)", n)
	}
	gotA = append(gotA, promptComplete(t, c, a, "and again")...)
	// Each event once, in order, across the failure.
	for i, ev := range gotA {
		if int(ev["seq"].(float64)) != i+1 {
			t.Fatalf("session a: seq %v at position %d, want %d", ev["seq"], i, i+1)
		}
	}
}
