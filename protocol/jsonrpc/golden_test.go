package jsonrpc_test

import (
	"testing"

	"github.com/trellis-run/trellis/internal/transcript"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/protocol/jsonrpc/jsonrpctest"
)

// TestGoldenTranscripts plays protocol/testdata/jsonrpc/*.txtar against the
// fake table behind the hello gate, over an in-memory pipe. Rewrite with
// go test ./protocol/jsonrpc -run TestGoldenTranscripts -update.
func TestGoldenTranscripts(t *testing.T) {
	transcript.RunDir(t, "../testdata/jsonrpc/*.txtar", func(t *testing.T) jsonrpc.Transport {
		client, server := jsonrpctest.Pipe()
		conn := jsonrpctest.ServeFake(server, jsonrpc.Options{})
		t.Cleanup(func() { conn.Close() })
		return client
	})
}
