package bench

import (
	"slices"
	"testing"
	"time"
)

// TestSoakWindow: a window holds the readings taken in it, or, when the
// sampler took none there (it fell behind on a slow machine), the one
// nearest it, so that a figure is never a zero that was not read.
func TestSoakWindow(t *testing.T) {
	ms := time.Millisecond
	var ss []soakSample
	for i, at := range []time.Duration{0, 150 * ms, 700 * ms, 1300 * ms} {
		s := soakSample{at: at}
		s.v[0] = float64(i + 1)
		ss = append(ss, s)
	}
	for _, tc := range []struct {
		from, to time.Duration
		want     []float64
	}{
		{0, 200 * ms, []float64{1, 2}},
		{200 * ms, 400 * ms, []float64{2}},   // none in it: 150 ms is nearer than 700
		{400 * ms, 600 * ms, []float64{3}},   // 700 ms is nearer than 150
		{1000 * ms, 2000 * ms, []float64{4}}, // the last window, as Soak asks for it
		{2000 * ms, 3000 * ms, []float64{4}},
	} {
		got := soakWindow(ss, tc.from, tc.to)
		var vs []float64
		for _, s := range got {
			vs = append(vs, s.v[0])
		}
		if !slices.Equal(vs, tc.want) {
			t.Errorf("window [%v, %v): readings %v, want %v", tc.from, tc.to, vs, tc.want)
		}
	}
	if got := soakWindow(nil, 0, time.Second); len(got) != 0 {
		t.Errorf("no readings at all: window %v", got)
	}
}
