package jsonrpc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/trellis-run/trellis/protocol/jsonrpc"
)

// TestOrderedNotifications pins the client side's rule: with
// OrderedNotifications every notification reaches the handler, one at a
// time and in arrival order, however far past MaxInFlight they go, and a
// request still runs concurrently (its handler may wait for a notification).
func TestOrderedNotifications(t *testing.T) {
	const n = 5000
	var mu sync.Mutex
	var got []int
	release := make(chan struct{})
	sawLast := make(chan struct{})
	h := jsonrpc.HandlerFunc(func(ctx context.Context, _ *jsonrpc.Conn, method string, params json.RawMessage) (any, *jsonrpc.Error) {
		if method == "ask" {
			<-sawLast // a request waits without holding the reader
			return "answered", nil
		}
		var p struct{ I int }
		_ = json.Unmarshal(params, &p)
		if p.I == 0 {
			<-release // a slow consumer: the reader waits, nothing is dropped
		}
		mu.Lock()
		got = append(got, p.I)
		mu.Unlock()
		if p.I == n-1 {
			close(sawLast)
		}
		return nil, nil
	})
	_, p := serve(t, h, jsonrpc.Options{MaxInFlight: 2, OrderedNotifications: true})
	p.send(`{"jsonrpc":"2.0","id":1,"method":"ask"}`)
	go func() {
		for i := range n {
			p.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"ev","params":{"i":%d}}`, i))
		}
	}()
	close(release)
	if r := p.recv(); r != `{"jsonrpc":"2.0","id":1,"result":"answered"}` {
		t.Fatalf("reply %s", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n {
		t.Fatalf("%d notifications handled, want %d", len(got), n)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("notification %d handled at position %d", v, i)
		}
	}
}
