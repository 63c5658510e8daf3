package client_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/trellis-run/trellis/client"
)

// A client that was away resumes a session from the last seq it saw: the
// daemon answers the stored events after it, in order, and the
// subscription goes on from there with no gap and no repeat.
func ExampleClient_Resume() {
	home, stop := exampleDaemon()
	defer stop()
	ctx := context.Background()

	first, err := client.Dial(ctx, home, client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	sub, err := first.CreateSession(ctx, client.CreateSessionParams{Workdir: home, Mode: "plan"})
	if err != nil {
		log.Fatal(err)
	}
	id := sub.SessionID()
	if _, err := first.Prompt(ctx, id, "hello"); err != nil {
		log.Fatal(err)
	}
	// This client sees the turn start, then goes away.
	var seen int64
	for seen == 0 {
		ev, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if ev.Kind == "turn.started" {
			seen = ev.Seq
		}
	}
	first.Close()

	again, err := client.Dial(ctx, home, client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer again.Close()
	res, rest, err := again.Resume(ctx, id, seen)
	if err != nil {
		log.Fatal(err)
	}
	// What was stored while away, then what comes next, to the turn's end.
	// A message.delta carries one or more of the model's chunks: their text
	// is printed once the deltas end.
	evs := res.Events
	var text strings.Builder
	for i := 0; ; i++ {
		if i == len(evs) {
			ev, err := rest.Next(ctx)
			if err != nil {
				log.Fatal(err)
			}
			evs = append(evs, ev)
		}
		ev := evs[i]
		if ev.Seq != seen+int64(i)+1 {
			log.Fatalf("seq %d after %d", ev.Seq, seen+int64(i))
		}
		if ev.Kind != "message.delta" && text.Len() > 0 {
			fmt.Println("message.delta", text.String())
			text.Reset()
		}
		switch ev.Kind {
		case "message.delta":
			var d struct{ Text string }
			if err := ev.Decode(&d); err != nil {
				log.Fatal(err)
			}
			text.WriteString(d.Text)
		case "message.user", "message.done":
			var m struct{ Text string }
			if err := ev.Decode(&m); err != nil {
				log.Fatal(err)
			}
			fmt.Println(ev.Kind, m.Text)
		case "turn.done":
			fmt.Println(ev.Kind)
			return
		default:
			fmt.Println(ev.Kind)
		}
	}
	// Output:
	// message.user hello
	// step.started
	// message.delta Hello! How can I help?
	// usage
	// step.done
	// message.done Hello! How can I help?
	// context
	// turn.done
}
