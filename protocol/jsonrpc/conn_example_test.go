package jsonrpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/protocol/jsonrpc/jsonrpctest"
)

// Two ends of one transport (a WebSocket in the daemon; an in-memory pipe
// here): the server's handler answers behind the system.hello gate, the
// client calls. A failed call is an *errcode.Error with its string code.
func ExampleConn_Call() {
	clientEnd, serverEnd := jsonrpctest.Pipe()
	handler := jsonrpc.HandlerFunc(func(ctx context.Context, c *jsonrpc.Conn, method string, params json.RawMessage) (any, *jsonrpc.Error) {
		switch method {
		case "system.hello":
			return map[string]any{"protocol": "1.0"}, nil
		case "echo":
			return params, nil
		}
		return nil, errcode.NewMethodNotFound(method)
	})
	server := jsonrpc.NewConn(serverEnd, jsonrpc.Gate("system.hello", handler), jsonrpc.Options{})
	go server.Serve(context.Background())
	client := jsonrpc.NewConn(clientEnd, nil, jsonrpc.Options{})
	go client.Serve(context.Background())
	defer client.Close()

	ctx := context.Background()
	_, err := client.Call(ctx, "echo", map[string]string{"text": "too early"})
	var e *errcode.Error
	if errors.As(err, &e) {
		fmt.Println(e.StringCode())
	}
	if _, err := client.Call(ctx, "system.hello", nil); err != nil {
		log.Fatal(err)
	}
	res, err := client.Call(ctx, "echo", map[string]string{"text": "hi"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(res))
	// Output:
	// unauthorized
	// {"text":"hi"}
}
