//go:build trellis_lean

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newBenchCmd of a lean build (-tags trellis_lean, the README's first
// run), which leaves the benchmarks (and the PostgreSQL driver scale needs)
// out: `trellis bench …` says so.
func newBenchCmd(*app) *cobra.Command {
	return &cobra.Command{
		Use:                "bench",
		Short:              "Measure the daemon (not in this build: -tags trellis_lean)",
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("this build of trellis leaves the benchmarks out (-tags trellis_lean); build without the tag (go run ./cmd/trellis bench) to run them")
		},
	}
}
