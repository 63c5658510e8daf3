// Package client is a Go client of Trellis's external protocol (PROTOCOL.md):
// it finds the daemon of a home directory, speaks JSON-RPC 2.0 over
// WebSocket to it, delivers each session's events in seq order, and answers
// the daemon's approval requests through a callback.
//
// A typical use:
//
//	c, err := client.Dial(ctx, home, client.Options{Approve: myApprover})
//	sub, err := c.CreateSession(ctx, client.CreateSessionParams{Workdir: dir})
//	turnID, err := c.Prompt(ctx, sub.SessionID(), "hello")
//	for {
//		ev, err := sub.Next(ctx)
//		...
//		if ev.Kind == "turn.done" && ev.TurnID() == turnID {
//			break
//		}
//	}
//
// The connection delivers notifications concurrently, so events may arrive
// out of order; a Subscription puts them back in seq order, starting right
// after the point where it subscribed, with no gap and no duplicate.
package client
