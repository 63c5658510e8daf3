package sshbackend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Config is backend.set's ssh config.
type Config struct {
	Kind           string `json:"kind"`
	Host           string `json:"host"`
	Port           int    `json:"port,omitempty"`
	User           string `json:"user"`
	KeyPath        string `json:"keyPath,omitempty"`
	KnownHostsPath string `json:"knownHostsPath,omitempty"`
	// Workdir is the remote directory the tools are confined to (absolute).
	Workdir string `json:"workdir"`
}

// ParseConfig reads and checks backend.set's config object, reporting
// every problem at once; defaults: port 22, ~/.ssh/known_hosts.
func ParseConfig(m map[string]any) (Config, error) {
	raw, _ := json.Marshal(m)
	var c Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("ssh config: %v (fields: host, port, user, keyPath, knownHostsPath, workdir)", err)
	}
	c.Kind = "ssh"
	var problems []string
	if c.Host == "" {
		problems = append(problems, "host is required")
	}
	if c.User == "" {
		problems = append(problems, "user is required")
	}
	if c.Port == 0 {
		c.Port = 22
	}
	if c.Port < 1 || c.Port > 65535 {
		problems = append(problems, fmt.Sprintf("port %d is out of range", c.Port))
	}
	if c.Workdir == "" || !path.IsAbs(c.Workdir) {
		problems = append(problems, fmt.Sprintf("workdir %q must be an absolute path on the remote host", c.Workdir))
	}
	if c.KnownHostsPath == "" {
		if home, err := os.UserHomeDir(); err == nil {
			c.KnownHostsPath = filepath.Join(home, ".ssh", "known_hosts")
		}
	}
	if len(problems) > 0 {
		return c, errors.New("ssh config: " + strings.Join(problems, "; "))
	}
	c.Workdir = path.Clean(c.Workdir)
	return c, nil
}

// Public is the config without anything secret, for backend.changed.
func (c Config) Public() map[string]any {
	m := map[string]any{"kind": "ssh", "host": c.Host, "port": c.Port, "user": c.User, "workdir": c.Workdir}
	if c.KeyPath != "" {
		m["keyPath"] = c.KeyPath
	}
	if c.KnownHostsPath != "" {
		m["knownHostsPath"] = c.KnownHostsPath
	}
	return m
}
