package session

import "sync"

// Origins records the origin of each live session: the client connection
// (system.hello's) whose approver answers its approval requests. The
// session service keeps it (a session's origin changes when a client
// re-binds or resumes it); the approval broker reads it to route a
// request (Of). It is made before both, so that neither needs the other.
type Origins struct {
	mu sync.Mutex
	m  map[string]string
}

// NewOrigins returns an empty registry.
func NewOrigins() *Origins { return &Origins{m: map[string]string{}} }

// Of returns the origin of a live session ("" when none, or when the
// session is not live).
func (o *Origins) Of(sessionID string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[sessionID]
}

// set records the origin of a session ("" forgets it).
func (o *Origins) set(sessionID, origin string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if origin == "" {
		delete(o.m, sessionID)
		return
	}
	o.m[sessionID] = origin
}

// replace makes origin the session's origin if its origin is still old.
func (o *Origins) replace(sessionID, old, origin string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m[sessionID] != old {
		return
	}
	if origin == "" {
		delete(o.m, sessionID)
		return
	}
	o.m[sessionID] = origin
}
