package rpc

import "testing"

// TestPager: pages start at 256 events, at most double, and settle at
// about pageBytes of payload, within minPageLimit and maxPageLimit; large
// events shrink the next page at once.
func TestPager(t *testing.T) {
	for _, tc := range []struct {
		name  string
		avg   int   // bytes per event (payload and eventOverhead) of every page
		limit []int // the limits of the first pages
	}{
		{"small events", 200, []int{256, 512, 1024, 2048, 4096, 4096}},
		{"1 KiB events", 1024, []int{256, 512, 1024, 1024}},
		{"large events", 1 << 20, []int{256, 8, 8}},
		{"middle", 4096, []int{256, 256, 256}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p pager
			for i, want := range tc.limit {
				got := p.next()
				if got != want {
					t.Fatalf("page %d: limit %d, want %d (limits %v)", i, got, want, tc.limit)
				}
				p.observeSize(got, got*tc.avg)
			}
		})
	}
	// A short last page (fewer rows than the limit) grows the next from the limit, not the rows.
	var p pager
	p.observeSize(10, 10*200)
	if got := p.next(); got != 512 {
		t.Errorf("after a short page: limit %d, want 512", got)
	}
}
