package watch

import (
	"context"
	"errors"
	"testing"
)

func TestHub(t *testing.T) {
	h := &Hub[int]{Backlog: 2}
	ctx, cancel := context.WithCancel(context.Background())
	fast, slow := h.Add(ctx), h.Add(context.Background())
	h.Publish(1)
	h.Publish(2)
	if got := <-fast.Events(); got != 1 {
		t.Fatalf("first event %d", got)
	}
	h.Publish(3) // slow's backlog (1, 2) is full: it is dropped
	if _, ok := <-slow.Events(); !ok {
		t.Fatal("slow lost the events it had before lagging")
	}
	<-slow.Events()
	if _, ok := <-slow.Events(); ok || !errors.Is(slow.Err(), ErrLagged) {
		t.Fatalf("slow after lagging: err %v", slow.Err())
	}
	if a, b := <-fast.Events(), <-fast.Events(); a != 2 || b != 3 {
		t.Fatalf("fast got %d, %d", a, b)
	}
	cancel()
	if _, ok := <-fast.Events(); ok || fast.Err() != nil {
		t.Fatalf("fast after cancel: err %v", fast.Err())
	}
	other := h.Add(context.Background())
	h.Close()
	if _, ok := <-other.Events(); ok || !errors.Is(other.Err(), ErrClosed) {
		t.Fatalf("after Close: %v", other.Err())
	}
	late := h.Add(context.Background())
	if _, ok := <-late.Events(); ok || !errors.Is(late.Err(), ErrClosed) {
		t.Fatalf("Add after Close: %v", late.Err())
	}
}
