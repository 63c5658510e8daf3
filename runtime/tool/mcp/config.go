package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// ServerConfig is one entry of an mcpServers object, as Claude Desktop,
// Cursor and Claude Code write it: a stdio server (command, args, env, cwd)
// or an HTTP server (url, headers). Keys other clients add (alwaysAllow,
// autoApprove, …) are ignored.
type ServerConfig struct {
	// Type is "stdio", "http" (streamable HTTP) or "sse"; empty means stdio
	// when Command is set and http when URL is.
	Type    string            `json:"type,omitempty"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Disabled servers are listed as failed with that reason and never start.
	Disabled bool `json:"disabled,omitempty"`
	// TimeoutSec bounds one tool call (default 120 s); StartTimeoutSec the
	// start and handshake (default 30 s). Trellis extensions.
	TimeoutSec      float64 `json:"timeoutSec,omitempty"`
	StartTimeoutSec float64 `json:"startTimeoutSec,omitempty"`
}

// Defaults of a server's timeouts.
const (
	DefaultCallTimeout  = 120 * time.Second
	DefaultStartTimeout = 30 * time.Second
)

// Transport is "stdio", "http" or "sse".
func (c ServerConfig) Transport() string {
	if c.Type != "" {
		if c.Type == "streamable-http" || c.Type == "streamableHttp" {
			return "http"
		}
		return c.Type
	}
	if c.URL != "" {
		return "http"
	}
	return "stdio"
}

func (c ServerConfig) callTimeout() time.Duration {
	if c.TimeoutSec > 0 {
		return time.Duration(c.TimeoutSec * float64(time.Second))
	}
	return DefaultCallTimeout
}

func (c ServerConfig) startTimeout() time.Duration {
	if c.StartTimeoutSec > 0 {
		return time.Duration(c.StartTimeoutSec * float64(time.Second))
	}
	return DefaultStartTimeout
}

// Servers maps server names to their configuration.
type Servers map[string]ServerConfig

// Names returns the server names, sorted.
func (s Servers) Names() []string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// namePattern keeps mcp__NAME__TOOL a valid tool name for every model API
// (letters, digits, _ and -); "__" is the separator, so a name cannot hold it.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)

// ValidName checks a server name.
func ValidName(name string) error {
	if !namePattern.MatchString(name) || strings.Contains(name, "__") {
		return fmt.Errorf("server name %q must be 1-40 letters, digits, _ or - without a double underscore", name)
	}
	return nil
}

// Validate reports every problem of one server's configuration at once.
func (c ServerConfig) Validate() error {
	var problems []error
	switch c.Transport() {
	case "stdio":
		if c.Command == "" {
			problems = append(problems, errors.New(`a stdio server needs "command"`))
		}
		if c.URL != "" {
			problems = append(problems, errors.New(`give "command" or "url", not both`))
		}
	case "http", "sse":
		if c.Command != "" {
			problems = append(problems, errors.New(`give "command" or "url", not both`))
		}
		u, err := url.Parse(c.URL)
		switch {
		case c.URL == "":
			problems = append(problems, fmt.Errorf(`an %s server needs "url"`, c.Transport()))
		case err != nil:
			problems = append(problems, fmt.Errorf("url: %v", err))
		case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
			problems = append(problems, fmt.Errorf("url %q: want an http or https URL", c.URL))
		}
	default:
		problems = append(problems, fmt.Errorf(`type %q: want "stdio", "http" or "sse"`, c.Type))
	}
	if c.TimeoutSec < 0 || c.StartTimeoutSec < 0 {
		problems = append(problems, errors.New("timeouts must not be negative"))
	}
	return errors.Join(problems...)
}

// Parse reads an mcpServers document: {"mcpServers": {NAME: ServerConfig}}.
// A bare {NAME: ServerConfig} object is accepted too. It reports every bad
// server at once, naming it.
func Parse(data []byte) (Servers, error) {
	var doc struct {
		MCPServers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	raw := doc.MCPServers
	if raw == nil {
		var bare map[string]json.RawMessage
		if err := json.Unmarshal(data, &bare); err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
		if len(bare) > 0 {
			return nil, errors.New(`no "mcpServers" object: want {"mcpServers": {"NAME": {"command": …} | {"url": …}}}`)
		}
		raw = map[string]json.RawMessage{}
	}
	out := Servers{}
	var problems []error
	for _, name := range sortedKeys(raw) {
		if err := ValidName(name); err != nil {
			problems = append(problems, err)
			continue
		}
		var c ServerConfig
		dec := json.NewDecoder(bytes.NewReader(raw[name]))
		if err := dec.Decode(&c); err != nil {
			problems = append(problems, fmt.Errorf("server %s: %v", name, err))
			continue
		}
		if err := c.Validate(); err != nil {
			problems = append(problems, fmt.Errorf("server %s: %w", name, err))
			continue
		}
		out[name] = c
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return out, nil
}

// Load reads and parses an mcpServers file; a missing file is no servers
// when optional is true.
func Load(path string, optional bool) (Servers, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if optional && errors.Is(err, os.ErrNotExist) {
			return Servers{}, nil
		}
		return nil, err
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Merge returns a with b's servers added; b wins on a name in both.
func Merge(a, b Servers) Servers {
	out := Servers{}
	for n, c := range a {
		out[n] = c
	}
	for n, c := range b {
		out[n] = c
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
