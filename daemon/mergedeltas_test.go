package daemon

import (
	"strings"
	"testing"

	"github.com/trellis-run/trellis/runtime/eventlog"
)

func TestMergeDeltasFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, eventlog.DefaultMergeMax},
		{[]string{"--merge-deltas", "0"}, -1}, // off
		{[]string{"--merge-deltas", "4096"}, 4096},
	} {
		cfg, err := ParseFlags("trellisd", tc.args)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.MergeDeltas != tc.want {
			t.Errorf("%v: MergeDeltas = %d, want %d", tc.args, cfg.MergeDeltas, tc.want)
		}
	}
	err := Config{MergeDeltas: 2 << 20}.WithDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), "merge-deltas 2097152") {
		t.Errorf("Validate = %v, want the merge-deltas limit", err)
	}
}
