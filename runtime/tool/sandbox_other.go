//go:build !linux

package tool

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// ProbeSandbox reports what the command sandbox can use on this system:
// nothing outside Linux.
func ProbeSandbox() SandboxInfo {
	return SandboxInfo{
		Platform:   runtime.GOOS,
		Problem:    "command sandboxing (Landlock) exists only on Linux",
		NetProblem: "commands can be kept off the network only on Linux (network namespaces)",
	}
}

// startCommand starts cmd in a process group of its own; a sandbox cannot
// be had here, so spec must be nil.
func startCommand(cmd *exec.Cmd, spec *sandboxSpec, noNet bool) (<-chan error, error) {
	if spec != nil {
		return nil, errors.New(ProbeSandbox().Problem)
	}
	if noNet {
		return nil, errors.New(ProbeSandbox().NetProblem)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return exited, nil
}

// denyPortsRuleset: no Landlock here, so no ports are refused.
func denyPortsRuleset([]int) (*os.File, error) { return nil, nil }

// slirpPath: network namespaces exist only on Linux.
func slirpPath() string { return "" }
