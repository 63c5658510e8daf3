package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/daemon"
)

// Connect to the daemon of a home, open a session, prompt it and print the
// answer as it streams, up to the turn's end. (The example starts a daemon
// of its own, with a scripted model, in a temporary home.)
func Example() {
	home, stop := exampleDaemon()
	defer stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, home, client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	sub, err := c.CreateSession(ctx, client.CreateSessionParams{Workdir: home, Mode: "plan"})
	if err != nil {
		log.Fatal(err)
	}
	turn, err := c.Prompt(ctx, sub.SessionID(), "hello")
	if err != nil {
		log.Fatal(err)
	}
	var answer strings.Builder
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		switch ev.Kind {
		case "message.delta":
			answer.WriteString(ev.Text())
		case "turn.done":
			var done struct{ Reason string }
			if err := ev.Decode(&done); err != nil {
				log.Fatal(err)
			}
			if ev.TurnID() == turn {
				fmt.Println(answer.String())
				fmt.Println("turn", done.Reason)
				return
			}
		}
	}
	// Output:
	// Hello! How can I help?
	// turn complete
}

// A call that changes state carries an operation id: a repeat with the
// same id, after an answer was lost, answers the first call's outcome
// instead of acting again. The client gives every such call an id of its
// own; a caller that retries by itself sets one with WithOperationID.
func ExampleWithOperationID() {
	home, stop := exampleDaemon()
	defer stop()
	c, err := client.Dial(context.Background(), home, client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := client.WithOperationID(context.Background(), client.NewOperationID())
	var first, retry struct{ SessionID string }
	params := map[string]any{"workdir": home}
	if err := c.Call(ctx, "session.create", params, &first); err != nil {
		log.Fatal(err)
	}
	if err := c.Call(ctx, "session.create", params, &retry); err != nil {
		log.Fatal(err)
	}
	sessions, err := c.ListSessions(context.Background(), false, home)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(retry.SessionID == first.SessionID, len(sessions))
	// Output: true 1
}

// exampleDaemon starts a daemon with a scripted model in a new home.
func exampleDaemon() (home string, stop func()) {
	home, err := os.MkdirTemp("", "trellis-example")
	if err != nil {
		log.Fatal(err)
	}
	script := filepath.Join(home, "script.json")
	if err := os.WriteFile(script, []byte(`{"steps":[{"match":"hello","text":"Hello! How can I help?"}]}`), 0o600); err != nil {
		log.Fatal(err)
	}
	d, err := daemon.Start(context.Background(), daemon.Config{Home: home, Provider: "fake:" + script})
	if err != nil {
		log.Fatal(err)
	}
	return home, func() { d.Stop(); os.RemoveAll(home) }
}
