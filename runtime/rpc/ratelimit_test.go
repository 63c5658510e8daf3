package rpc

import (
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/auth"
)

func TestKeyLimiter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := newKeyLimiter()
	l.now = func() time.Time { return now }
	p := auth.Principal{KeyID: "k-1", KeyRate: 2}
	for i := range 2 {
		if ok, _ := l.allow(p); !ok {
			t.Fatalf("call %d of a full bucket of 2 refused", i)
		}
	}
	ok, retry := l.allow(p)
	if ok || retry != 500*time.Millisecond {
		t.Fatalf("third call: ok %v, retry after %v; want refused, 500ms", ok, retry)
	}
	now = now.Add(500 * time.Millisecond)
	if ok, _ := l.allow(p); !ok {
		t.Fatal("refused after the retry delay")
	}
	// Another key has its own bucket; no key or no rate is never limited.
	if ok, _ := l.allow(auth.Principal{KeyID: "k-2", KeyRate: 1}); !ok {
		t.Fatal("another key refused")
	}
	for range 10 {
		if ok, _ := l.allow(auth.Principal{KeyID: "k-3"}); !ok {
			t.Fatal("a key without a rate refused")
		}
		if ok, _ := l.allow(auth.Builtin()); !ok {
			t.Fatal("the daemon token refused")
		}
	}
	// Saved-up tokens never pass a second's worth.
	now = now.Add(time.Hour)
	for i := range 2 {
		if ok, _ := l.allow(p); !ok {
			t.Fatalf("call %d after an hour refused", i)
		}
	}
	if ok, _ := l.allow(p); ok {
		t.Fatal("an hour idle saved up more than a second's worth")
	}
}
