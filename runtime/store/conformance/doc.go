// Package conformance is the behaviour suite every store.Store backend must pass.
//
// A backend's test calls Run with a constructor for an empty store; the suite
// pins the contract documented on the store interfaces, including the
// one-transaction properties (a failing batch writes nothing, DeleteSessions
// removes rows, events and history together and counts right).
package conformance
