package workspace

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkSnapshot is the snapshot of a checkpoint after a write tool
// call changed one file of a workdir of n files (docs/performance.md):
// walked whole, or from the last one with a Watch.
func BenchmarkSnapshot(b *testing.B) {
	for _, n := range []int{200, 5000} {
		root := b.TempDir()
		old := time.Now().Add(-time.Hour)
		buf := make([]byte, 4<<10)
		for i := range n {
			p := filepath.Join(root, "src", fmt.Sprint(i%50), fmt.Sprintf("f%d.txt", i))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
			buf[0], buf[1] = byte(i), byte(i>>8)
			if err := os.WriteFile(p, buf, 0o644); err != nil {
				b.Fatal(err)
			}
			if err := os.Chtimes(p, old, old); err != nil {
				b.Fatal(err)
			}
		}
		changed := filepath.Join(root, "changed.txt")
		for _, watched := range []bool{false, true} {
			name := fmt.Sprintf("files=%d/walk", n)
			var w *Watch
			if watched {
				name = fmt.Sprintf("files=%d/watched", n)
				w = NewWatch()
				defer w.Close()
			}
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				prev, err := Snapshot(ctx, root, Options{Watch: w})
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; b.Loop(); i++ {
					b.StopTimer()
					if err := os.WriteFile(changed, fmt.Appendf(nil, "change %d", i), 0o644); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					m, err := Snapshot(ctx, root, Options{Watch: w, Previous: &prev})
					if err != nil {
						b.Fatal(err)
					}
					prev = m
				}
			})
		}
	}
}
