package dockerbackend

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	me := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	tests := []struct {
		name string
		in   map[string]any
		want Config
		errs []string
	}{
		{"defaults", map[string]any{"image": "busybox"},
			Config{Kind: "docker", Image: "busybox", CPUs: 1, MemoryMB: 1024, Pids: 256, Network: "none", User: me}, nil},
		{"every field", map[string]any{"image": "i:1", "cpus": 0.5, "memoryMb": 64, "pids": 32, "network": "bridge", "user": "1000:1000"},
			Config{Kind: "docker", Image: "i:1", CPUs: 0.5, MemoryMB: 64, Pids: 32, Network: "bridge", User: "1000:1000"}, nil},
		{"every problem", map[string]any{"cpus": -1, "memoryMb": 4, "pids": 1, "network": "host", "user": "a b"},
			Config{}, []string{"image is required", "cpus -1", "memoryMb 4", "pids 1", `network "host"`, `user "a b"`}},
		{"unknown field", map[string]any{"image": "i", "privileged": true}, Config{}, []string{`unknown field "privileged"`}},
		{"wrong type", map[string]any{"image": "i", "cpus": "two"}, Config{}, []string{"cpus"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(tc.in)
			if len(tc.errs) > 0 {
				for _, e := range tc.errs {
					if err == nil || !strings.Contains(err.Error(), e) {
						t.Fatalf("error %v lacks %q", err, e)
					}
				}
				return
			}
			if err != nil || c != tc.want {
				t.Fatalf("got %+v %v, want %+v", c, err, tc.want)
			}
		})
	}
}

// FuzzParseConfig: whatever the object, an accepted config is within the
// documented bounds and round-trips through the stored JSON.
func FuzzParseConfig(f *testing.F) {
	f.Add(`{"image":"busybox"}`)
	f.Add(`{"image":"i","cpus":0.5,"memoryMb":64,"pids":32,"network":"bridge","user":"1:1"}`)
	f.Add(`{"image":"","network":"host"}`)
	f.Fuzz(func(t *testing.T, raw string) {
		var m map[string]any
		if json.Unmarshal([]byte(raw), &m) != nil {
			return
		}
		c, err := ParseConfig(m)
		if err != nil {
			return
		}
		if strings.TrimSpace(c.Image) == "" || c.CPUs < 0.01 || c.MemoryMB < 8 || c.Pids < 8 ||
			(c.Network != "none" && c.Network != "bridge") || c.User == "" {
			t.Fatalf("accepted %+v", c)
		}
		stored, _ := json.Marshal(c)
		var back Config
		if json.Unmarshal(stored, &back) != nil || back != c {
			t.Fatalf("stored %s came back as %+v", stored, back)
		}
	})
}
