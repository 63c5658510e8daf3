package ws_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/trellis-run/trellis/protocol/ws"
)

// A server accepts a connection and answers each message; a client dials
// it, writes a frame and reads the answer. Each message is one whole
// JSON-RPC frame.
func ExampleAccept() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := ws.Accept(w, r, ws.Options{})
		if err != nil {
			return // Accept has answered the request
		}
		defer c.Close()
		for {
			msg, err := c.ReadMessage(r.Context())
			if err != nil {
				return
			}
			reply := strings.Replace(string(msg), `"method":"system.health"`, `"result":{"ok":true}`, 1)
			if err := c.WriteMessage(r.Context(), []byte(reply)); err != nil {
				return
			}
		}
	}))
	defer srv.Close()

	ctx := context.Background()
	c, err := ws.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), ws.Options{PingInterval: -1})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteMessage(ctx, []byte(`{"jsonrpc":"2.0","id":1,"method":"system.health"}`)); err != nil {
		log.Fatal(err)
	}
	reply, err := c.ReadMessage(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(reply))
	// Output: {"jsonrpc":"2.0","id":1,"result":{"ok":true}}
}

// A web page may drive the daemon only from a loopback page of the same
// host and port, or from an origin the operator allowed; a program (no
// Origin header) always may.
func ExampleCheckOrigin() {
	for _, origin := range []string{"", "http://127.0.0.1:7420", "https://console.example.com", "https://evil.example"} {
		r := httptest.NewRequest("GET", "http://127.0.0.1:7420/ws", nil)
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		verdict := "allowed"
		if err := ws.CheckOrigin(r, []string{"https://console.example.com"}); errors.Is(err, ws.ErrOriginRefused) {
			verdict = "refused"
		}
		fmt.Printf("%q %s\n", origin, verdict)
	}
	// Output:
	// "" allowed
	// "http://127.0.0.1:7420" allowed
	// "https://console.example.com" allowed
	// "https://evil.example" refused
}
