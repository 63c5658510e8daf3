package facade_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/internal/transcript"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/protocol/ws"
)

// goldenToken is the token the transcripts send; the test daemon's home is
// seeded with it.
const goldenToken = "golden-token-0123456789abcdefghijklmnopqrstuv"

// TestGoldenTranscriptsAgainstDaemon plays testdata/daemon/*.txtar against
// a real daemon (runtime and facade over gRPC), so that the handshake,
// params validation and error mapping are pinned end to end. Run with
// -update to rewrite the server sections.
func TestGoldenTranscriptsAgainstDaemon(t *testing.T) {
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "token"), []byte(goldenToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.Start(context.Background(), daemon.Config{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	url := fmt.Sprintf("ws://127.0.0.1:%d/ws", d.HTTPPort())
	dial := func(t *testing.T) jsonrpc.Transport {
		c, err := ws.Dial(context.Background(), url, ws.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	transcript.RunDir(t, "testdata/daemon/*.txtar", dial, transcript.Redact("connectionId", "serverVersion"))
}
