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
// Every method is also a typed call, generated from the protos: c.Calls()
// takes and returns the RPCs' messages (trellisv1.CreateSessionRequest, …),
// sent and read as the protocol renders them, e.g.
//
//	info, err := c.Calls().SystemInfo(ctx, nil)
//	p, err := c.Calls().PrincipalCreate(ctx, &trellisv1.CreatePrincipalRequest{Name: "ci", Role: "member"})
//
// session.resume keeps its own call (Resume), which delivers events.
//
// One reader delivers the daemon's notifications in arrival order. A
// Subscription hands out its session's events in seq order, starting right
// after the point where it subscribed, with no gap and no duplicate: a
// subscriber that falls behind slows its own connection down (the daemon
// holds the events back) and never loses one; an event missing for any
// reason is fetched from the daemon's store (session.resume) at once.
package client
