package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// runConfigCheck gives a daemon's command line to `trellisd config check`,
// with the paths of its secrets and home mapped to local ones by local,
// and env as its environment: a flag that does not exist, a value out of
// range or a certificate that does not load is refused as the daemon
// would refuse it at start.
func runConfigCheck(trellisd, who string, args []string, env map[string]string, local func(string) string) error {
	mapped := make([]string, len(args))
	for i, a := range args {
		if name, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(name, "--") {
			mapped[i] = name + "=" + local(v)
		} else {
			mapped[i] = local(a)
		}
	}
	cmd := exec.Command(trellisd, append([]string{"config", "check"}, mapped...)...)
	// Only what the daemon's container has: the checking machine's own
	// TRELLIS_ variables must not count.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+local(v))
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: trellisd config check refused its command line (%v):\n%s", who, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// configCheck checks every daemon's command line, its secrets mapped to
// their files and its home to a new directory.
func (p *composeProject) configCheck(trellisd string) error {
	home, err := os.MkdirTemp("", "deploycheck-home-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	for _, name := range p.daemons {
		s := p.project.Services[name]
		targets := p.secretTargets(s)
		homeFlag, _ := flagValue(s.Command, "home")
		local := func(v string) string {
			if f, ok := targets[v]; ok {
				return f
			}
			if v == homeFlag {
				return home
			}
			return v
		}
		env := map[string]string{}
		for k, v := range s.Environment {
			if v != nil && strings.HasPrefix(k, "TRELLIS_") {
				env[k] = *v
			}
		}
		if err := runConfigCheck(trellisd, "service "+name, s.Command, env, local); err != nil {
			return err
		}
	}
	return nil
}
