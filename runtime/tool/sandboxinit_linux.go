//go:build linux

package tool

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// A sandboxed command does not start bash directly: the daemon's own
// executable (/proc/self/exe) starts first, as process 1 of the command's
// new user, PID, mount (and, offline, network) namespaces, with the
// capabilities it needs there and nowhere else. Before it becomes bash
// (execve, same pid) it
//   - mounts a /proc of the command's PID namespace over the host's, so
//     that the command sees only its own processes: not the daemon's
//     command line (a --store DSN), nor any other process's;
//   - brings its network namespace's loopback up, when it has one;
//   - puts itself in the Landlock domain the daemon computed (mounting is
//     impossible once in it, hence this order) and drops every capability.
//
// It reads what to do from the pipe on fd 3 and reports a failure on the
// pipe on fd 4 (close-on-exec: nothing arrives when bash runs).

// sandboxInitEnv marks the daemon's executable started as a command's init.
const sandboxInitEnv = "TRELLIS_SANDBOX_INIT"

// initSpec is what the init does before it becomes the command.
type initSpec struct {
	Path  string     `json:"path"` // the command's executable, resolved
	Argv  []string   `json:"argv"`
	Env   []string   `json:"env"`
	Rules []wireRule `json:"rules"`
	ABI   int        `json:"abi"` // 0: no Landlock domain (the probe)
	// Hide lists host paths to cover with an empty read-only directory
	// when a /proc of the command's own cannot be mounted (a /proc that is
	// not fully visible, as in some containers): the daemon's /proc/<pid>.
	Hide     []string `json:"hide"`
	Loopback bool     `json:"loopback"` // bring lo up (a network namespace of its own)
	// HostProc skips the /proc of the command's own, as if it could not be
	// mounted (tests of the fallback).
	HostProc bool `json:"hostProc,omitempty"`
	// Ports says fd 5 is a Landlock ruleset refusing some TCP ports, to
	// stack on the file rules.
	Ports bool `json:"ports,omitempty"`
	// Resolv, when set, is bound over /etc/resolv.conf (the DNS of the
	// command's own network namespace, slirp4netns's).
	Resolv string `json:"resolv,omitempty"`
}

// testHostProc makes commands use the fallback of a /proc of their own;
// testHide adds a path to cover there (one that cannot be: a failed setup).
var (
	testHostProc bool
	testHide     string
)

// wireRule is a landlockRule as the spec carries it.
type wireRule struct {
	Path   string `json:"p"`
	Access uint64 `json:"a"`
}

func init() {
	if os.Getenv(sandboxInitEnv) == "" {
		return
	}
	// Never returns: becomes the command, or exits reporting why not.
	runtime.LockOSThread()
	status := os.NewFile(4, "status")
	if err := sandboxInit(os.NewFile(3, "spec")); err != nil {
		fmt.Fprintf(status, "%v", err)
		os.Exit(125)
	}
}

func sandboxInit(specFile *os.File) error {
	unix.CloseOnExec(4) // the command must not hold the status pipe
	b, err := io.ReadAll(specFile)
	specFile.Close()
	if err != nil {
		return fmt.Errorf("read the sandbox spec: %w", err)
	}
	var spec initSpec
	if err := json.Unmarshal(b, &spec); err != nil || len(spec.Argv) == 0 {
		return fmt.Errorf("bad sandbox spec: %v", err)
	}
	// Nothing mounted here propagates back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	err = unix.EPERM
	if !spec.HostProc {
		err = unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	}
	if err != nil {
		// A /proc of our own is refused when the host's is partly
		// covered (mount_too_revealing): cover the daemon's entry instead.
		for _, p := range spec.Hide {
			if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0555"); err != nil {
				return fmt.Errorf("no /proc of the command's own, and %s cannot be hidden: %w", p, err)
			}
		}
	}
	if spec.Loopback {
		if err := loopbackUp(); err != nil {
			return fmt.Errorf("bring up the command's loopback: %w", err)
		}
	}
	if spec.Resolv != "" {
		if _, err := os.Stat("/etc/resolv.conf"); err == nil {
			if err := unix.Mount(spec.Resolv, "/etc/resolv.conf", "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("give the command its network's resolv.conf: %w", err)
			}
		}
	}
	if spec.ABI > 0 {
		rules := make([]landlockRule, len(spec.Rules))
		for i, r := range spec.Rules {
			rules[i] = landlockRule{path: r.Path, access: r.Access}
		}
		if err := restrictThread(rules, spec.ABI); err != nil {
			return err
		}
		if spec.Ports {
			if err := restrictPorts(5); err != nil {
				return err
			}
			unix.Close(5)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	if err := syscall.Exec(spec.Path, spec.Argv, spec.Env); err != nil {
		return fmt.Errorf("start %s: %w", spec.Path, err)
	}
	return nil
}

// loopbackUp sets lo up in the current network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// viaInit rewrites cmd to start as the command's init (see above) in
// namespaces attr describes, and returns what to send it and the pipes.
// The caller writes spec to toInit and reads a failure from status.
func viaInit(cmd *exec.Cmd, attr *syscall.SysProcAttr, rules []landlockRule, abi int, ownNet bool, ports *os.File, resolv string) (spec []byte, toInit, status *os.File, cleanup func(), err error) {
	s := initSpec{Path: cmd.Path, Argv: cmd.Args, Env: cmd.Env, ABI: abi, Loopback: ownNet, Resolv: resolv,
		Hide: []string{"/proc/" + strconv.Itoa(os.Getpid())}, HostProc: testHostProc, Ports: ports != nil}
	if testHide != "" {
		s.Hide = append(s.Hide, testHide)
	}
	for _, r := range rules {
		s.Rules = append(s.Rules, wireRule{Path: r.path, Access: r.access})
	}
	if spec, err = json.Marshal(s); err != nil {
		return nil, nil, nil, nil, err
	}
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		closeAll(specR, specW)
		return nil, nil, nil, nil, err
	}
	if cmd.Err != nil {
		return nil, nil, nil, nil, cmd.Err // bash not found
	}
	cmd.Path = "/proc/self/exe"
	cmd.Args = []string{"trellis-sandbox"}
	cmd.Env = []string{sandboxInitEnv + "=1"}
	cmd.ExtraFiles = []*os.File{specR, statusW}
	if ports != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, ports)
	}
	attr.Cloneflags |= syscall.CLONE_NEWNS
	attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN}
	return spec, specW, statusR, func() { closeAll(specR, statusW) }, nil
}
