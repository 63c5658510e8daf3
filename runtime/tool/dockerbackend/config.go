package dockerbackend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Config is backend.set's docker config.
type Config struct {
	Kind string `json:"kind"`
	// Image is the image each session's container is made from; it must be
	// on the engine already (nothing is pulled) and have /bin/sh.
	Image string `json:"image"`
	// CPUs caps the container's CPU time in cores (default 1).
	CPUs float64 `json:"cpus,omitempty"`
	// MemoryMB caps its memory (default 1024).
	MemoryMB int64 `json:"memoryMb,omitempty"`
	// Pids caps its number of processes (default 256).
	Pids int64 `json:"pids,omitempty"`
	// Network is "none" (the default: no network at all) or "bridge".
	Network string `json:"network,omitempty"`
	// User runs the commands as uid[:gid] (default: the daemon's own, so
	// the files they write in the workdir belong to the daemon's user).
	User string `json:"user,omitempty"`
}

// The defaults of a session's container.
const (
	defaultCPUs     = 1
	defaultMemoryMB = 1024
	defaultPids     = 256
)

// ParseConfig reads and checks backend.set's config object, reporting every
// problem at once, and fills in the defaults.
func ParseConfig(m map[string]any) (Config, error) {
	raw, _ := json.Marshal(m)
	var c Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("docker config: %v (fields: image, cpus, memoryMb, pids, network, user)", err)
	}
	c.Kind = "docker"
	var problems []string
	if strings.TrimSpace(c.Image) == "" {
		problems = append(problems, "image is required (an image already on the engine, with /bin/sh)")
	}
	if c.CPUs == 0 {
		c.CPUs = defaultCPUs
	}
	if c.CPUs < 0.01 || c.CPUs > 1024 {
		problems = append(problems, fmt.Sprintf("cpus %g is out of range (0.01 to 1024)", c.CPUs))
	}
	if c.MemoryMB == 0 {
		c.MemoryMB = defaultMemoryMB
	}
	if c.MemoryMB < 8 || c.MemoryMB > 1<<20 {
		problems = append(problems, fmt.Sprintf("memoryMb %d is out of range (8 to 1048576)", c.MemoryMB))
	}
	if c.Pids == 0 {
		c.Pids = defaultPids
	}
	if c.Pids < 8 || c.Pids > 1<<22 {
		problems = append(problems, fmt.Sprintf("pids %d is out of range (8 to 4194304)", c.Pids))
	}
	switch c.Network {
	case "":
		c.Network = "none"
	case "none", "bridge":
	default:
		problems = append(problems, fmt.Sprintf("network %q is not one of none, bridge", c.Network))
	}
	if c.User == "" {
		c.User = fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	} else if strings.ContainsAny(c.User, " \t\n") {
		problems = append(problems, fmt.Sprintf("user %q must be uid[:gid] or a name, without spaces", c.User))
	}
	if len(problems) > 0 {
		return c, errors.New("docker config: " + strings.Join(problems, "; "))
	}
	return c, nil
}

// Public is the config as backend.changed shows it (it holds no secret).
func (c Config) Public() map[string]any {
	return map[string]any{"kind": "docker", "image": c.Image, "cpus": c.CPUs, "memoryMb": c.MemoryMB,
		"pids": c.Pids, "network": c.Network, "user": c.User}
}
