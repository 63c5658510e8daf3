package provider

import "testing"

// LeaveOut makes the vendors behave, until the test ends, as in a binary
// built without their SDK (the trellis_lean / trellis_no_<vendor> tags).
// Services opened meanwhile see them as left out.
func LeaveOut(t testing.TB, names ...string) {
	saved := map[string]clientFactory{}
	for _, n := range names {
		if f, ok := clients[n]; ok {
			saved[n] = f
			delete(clients, n)
		}
	}
	t.Cleanup(func() {
		for n, f := range saved {
			clients[n] = f
		}
	})
}
