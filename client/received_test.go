package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/protocol/ws"
	"github.com/trellis-run/trellis/version"
)

// scriptedDaemon is a daemon of one connection whose session.event
// notifications the test sends itself, in the order it wants: what a real
// daemon sends only in races (a live event the resume reply holds too, an
// event after Close, a lease_lost notice).
type scriptedDaemon struct {
	conn chan *jsonrpc.Conn
	// resume answers session.resume: the live events sent before the
	// reply, and the reply's stored events.
	resume func(afterSeq int64) (live, stored []string)
}

// event is a session.event object of session s1.
func event(seq int64, extra string) string {
	return fmt.Sprintf(`{"sessionId":"s1","seq":%d,"kind":"message.delta","payload":{"text":"x"},"ts":"2026-01-01T00:00:00Z"%s}`, seq, extra)
}

func (d *scriptedDaemon) handle(ctx context.Context, c *jsonrpc.Conn, method string, params json.RawMessage) (any, *jsonrpc.Error) {
	switch method {
	case "system.hello":
		return map[string]any{"protocolVersion": version.Protocol, "serverVersion": "test", "connectionId": "c1"}, nil
	case "session.resume":
		var p struct {
			AfterSeq int64 `json:"afterSeq"`
		}
		_ = json.Unmarshal(params, &p)
		live, stored := d.resume(p.AfterSeq)
		for _, ev := range live {
			_ = c.Notify(ctx, "session.event", json.RawMessage(ev))
		}
		return map[string]any{"sessionId": "s1", "events": json.RawMessage("[" + strings.Join(stored, ",") + "]")}, nil
	default: // test.sync: its reply follows what was sent before
		return map[string]any{}, nil
	}
}

func startScripted(t *testing.T, d *scriptedDaemon) *client.Client {
	t.Helper()
	d.conn = make(chan *jsonrpc.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, err := ws.Accept(w, r, ws.Options{})
		if err != nil {
			return
		}
		conn := jsonrpc.NewConn(t, jsonrpc.HandlerFunc(d.handle), jsonrpc.Options{})
		d.conn <- conn
		_ = conn.Serve(context.Background())
	}))
	t.Cleanup(srv.Close)
	port, err := strconv.Atoi(srv.URL[strings.LastIndex(srv.URL, ":")+1:])
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.DialInfo(testCtx(t), daemonfile.Info{Port: port, Token: "t"}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestReceivedCountsOnlyDelivered pins that Received never passes what Next
// delivers: a caller that waits until Next has passed Received (the CLI's
// approval prompt, trellis acp) would otherwise wait for an event that
// never comes, until the request's timeout.
func TestReceivedCountsOnlyDelivered(t *testing.T) {
	d := &scriptedDaemon{}
	d.resume = func(after int64) (live, stored []string) {
		if after == 0 {
			// Event 3 is stored when the subscription starts: the reply
			// holds it and it comes live too.
			return []string{event(3, "")}, []string{event(1, ""), event(2, ""), event(3, "")}
		}
		return nil, nil
	}
	c := startScripted(t, d)
	server := <-d.conn
	ctx := testCtx(t)
	// push sends events and waits until the client's reader took them.
	push := func(evs ...string) {
		t.Helper()
		for _, ev := range evs {
			if err := server.Notify(ctx, "session.event", json.RawMessage(ev)); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Call(ctx, "test.sync", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	next := func(sub *client.Subscription, want int64) {
		t.Helper()
		ev, err := sub.Next(ctx)
		if err != nil || ev.Seq != want {
			t.Fatalf("Next = %d, %v; want %d", ev.Seq, err, want)
		}
	}

	// Before the starting point: the resume reply delivered 1 to 3, Next
	// starts at 4.
	res, sub, err := c.Resume(ctx, "s1", 0)
	if err != nil || len(res.Events) != 3 {
		t.Fatalf("resume: %d events, %v", len(res.Events), err)
	}
	if got := sub.Received(); got != 0 {
		t.Fatalf("after resume, Received = %d, want 0: event 3 came before the starting point, Next never returns it", got)
	}
	push(event(4, ""))
	if got := sub.Received(); got != 4 {
		t.Fatalf("Received = %d, want 4", got)
	}
	next(sub, 4)

	// After Close: event 5 is dropped; resumed after it, Next starts at 6.
	sub.Close()
	push(event(5, ""))
	if _, sub, err = c.Resume(ctx, "s1", 5); err != nil {
		t.Fatal(err)
	}
	if got := sub.Received(); got != 4 {
		t.Fatalf("after Close and resume, Received = %d, want 4: event 5 was dropped", got)
	}

	// A lease_lost notice at 7 voids the unstored 8 (7 never came): the
	// log's 7 is delivered next.
	push(event(6, `,"unstored":true`), event(8, `,"unstored":true`), event(7, `,"retracted":true`))
	if got := sub.Received(); got != 6 {
		t.Fatalf("after the retracted notice, Received = %d, want 6: event 8 was voided", got)
	}
	next(sub, 6)
	next(sub, 7) // the notice
	push(event(7, ""))
	if got := sub.Received(); got != 7 {
		t.Fatalf("Received = %d, want 7", got)
	}
	next(sub, 7)
}
