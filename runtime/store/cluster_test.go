package store_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/trellis-run/trellis/runtime/store"
)

// TestWriterFences: what a Writer gives the backends to check. Unfenced
// checks nothing; a fenced writer names one fence per key and refuses a key
// it has no fence on; the zero Writer refuses everything; With replaces a
// fence on the same key and turns an Unfenced writer into a fenced one.
func TestWriterFences(t *testing.T) {
	a1 := store.Fence{Key: "a", OwnerID: "d1", Epoch: 1}
	a2 := store.Fence{Key: "a", OwnerID: "d2", Epoch: 2}
	b1 := store.Fence{Key: "b", OwnerID: "d1", Epoch: 1}

	fs, err := store.Unfenced().FencesOf([]string{"a", "b"})
	if err != nil || fs != nil {
		t.Fatalf("Unfenced FencesOf = %v, %v; want none", fs, err)
	}
	if fs, err := store.Unfenced().AllFences(); err != nil || fs != nil {
		t.Fatalf("Unfenced AllFences = %v, %v; want none", fs, err)
	}

	w := store.Under(b1, a1)
	fs, err = w.FencesOf([]string{"b", "a", "b"})
	if err != nil || !reflect.DeepEqual(fs, []store.Fence{a1, b1}) {
		t.Fatalf("FencesOf = %v, %v; want a1, b1 by key", fs, err)
	}
	if _, err := w.FencesOf([]string{"a", "c"}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("FencesOf a key with no fence: %v, want ErrLeaseLost", err)
	}
	if w.IsUnfenced() {
		t.Fatal("a writer Under fences is Unfenced")
	}

	var zero store.Writer
	if _, err := zero.FencesOf([]string{"a"}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("zero Writer FencesOf: %v, want ErrLeaseLost", err)
	}
	if _, err := zero.AllFences(); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("zero Writer AllFences: %v, want ErrLeaseLost", err)
	}

	w2 := w.With(a2)
	if f, _ := w2.Fence("a"); f != a2 {
		t.Fatalf("With replaced a's fence by %v, want %v", f, a2)
	}
	if f, _ := w.Fence("a"); f != a1 {
		t.Fatalf("With changed the writer it was called on: a is %v", f)
	}
	if fs, err := w2.AllFences(); err != nil || !reflect.DeepEqual(fs, []store.Fence{a2, b1}) {
		t.Fatalf("AllFences = %v, %v; want a2, b1", fs, err)
	}

	u := store.Unfenced().With(b1)
	if u.IsUnfenced() {
		t.Fatal("an Unfenced writer With a fence is still Unfenced")
	}
	if _, err := u.FencesOf([]string{"a"}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Unfenced().With(b) writing a: %v, want ErrLeaseLost", err)
	}

	l := store.Lease{SessionID: "s", OwnerID: "d1", Epoch: 3}
	if got := l.Fence(); got != (store.Fence{Key: "s", OwnerID: "d1", Epoch: 3}) {
		t.Fatalf("Lease.Fence = %+v", got)
	}
}
