// Package cluster owns this daemon's membership of a group of daemons
// sharing one store: its registry row and heartbeat, the leases of the
// sessions it owns (acquired, renewed, lost, released) and the wake-ups of
// local event tails when another daemon commits events.
package cluster
