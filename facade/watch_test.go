package facade

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/protocol/jsonrpc/jsonrpctest"
)

// TestWatchNotificationsBacklog: a connection's watch notifications reach
// a client that reads, in order, however fast they come within the
// backlog; a client that reads nothing has its connection closed once the
// pipe, the write queue and the backlog are full, rather than silently
// missing one.
func TestWatchNotificationsBacklog(t *testing.T) {
	tests := []struct {
		name   string
		reads  bool
		frames int
	}{
		{"a client that reads gets every notification in order", true, maxWatchBacklog},
		// The pipe holds 4096 frames; the writer may hold a write queue's
		// worth taken together.
		{"a client that reads nothing is closed", false, 4096 + 2*jsonrpc.DefaultWriteQueue + maxWatchBacklog + 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := slog.New(slog.DiscardHandler)
			server, client := jsonrpctest.Pipe()
			c := &wsConn{log: log}
			c.rpc = jsonrpc.NewConn(server, jsonrpc.HandlerFunc(func(context.Context, *jsonrpc.Conn, string, json.RawMessage) (any, *jsonrpc.Error) {
				return nil, nil
			}), jsonrpc.Options{Log: log})
			c.notes = newNotes(c)
			go func() { _ = c.rpc.Serve(context.Background()) }()
			t.Cleanup(func() { _ = c.rpc.Close() })
			var (
				mu  sync.Mutex
				got []int
				all = make(chan struct{})
			)
			if tt.reads { // the frames as the client reads them, in order
				go func() {
					for {
						m, err := client.ReadMessage(context.Background())
						if err != nil {
							return
						}
						var f struct{ Params struct{ N int } }
						_ = json.Unmarshal(m, &f)
						mu.Lock()
						if got = append(got, f.Params.N); len(got) == tt.frames {
							close(all)
						}
						mu.Unlock()
					}
				}()
			}
			for i := range tt.frames {
				c.deliver(jsonrpc.NotificationFrame("test.note", []byte(`{"n":`+strconv.Itoa(i)+`}`)))
			}
			wait := func(what string, ch <-chan struct{}) {
				select {
				case <-ch:
				case <-time.After(20 * time.Second):
					t.Fatal(what)
				}
			}
			if !tt.reads {
				wait("the connection of a client that reads nothing is still open", c.rpc.Done())
				return
			}
			wait("not every notification arrived", all)
			mu.Lock()
			defer mu.Unlock()
			for i, n := range got {
				if n != i {
					t.Fatalf("notification %d is %d: out of order", i, n)
				}
			}
			select {
			case <-c.rpc.Done():
				t.Fatal("the connection of a client that reads was closed")
			default:
			}
		})
	}
}
