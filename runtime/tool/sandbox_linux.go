//go:build linux

package tool

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock access rights (uapi/linux/landlock.h), by ABI version.
const (
	llRead = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	// llWrite leaves out MAKE_CHAR and MAKE_BLOCK: no command may create a
	// device node (a raw disk would bypass every path rule).
	llWrite = unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	llDevices = unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK
	llRefer   = unix.LANDLOCK_ACCESS_FS_REFER    // ABI 2
	llTrunc   = unix.LANDLOCK_ACCESS_FS_TRUNCATE // ABI 3
	// llFileOnly are the rights a rule on a non-directory may carry.
	llFileOnly = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE
	// llScopes (ABI 6): no signal to, and no abstract socket of, a process
	// outside the sandbox (the daemon).
	llScopes = unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
)

// devAllowed are the device files a command may use; the rest of /dev
// (raw disks, memory) is closed.
var devAllowed = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/pts", "/dev/ptmx"}

var probeOnce sync.Once
var probed SandboxInfo

// ProbeSandbox reports what the command sandbox can use on this system
// (checked once per process).
func ProbeSandbox() SandboxInfo {
	probeOnce.Do(func() { probed = probe() })
	return probed
}

func probe() SandboxInfo {
	info := SandboxInfo{Platform: "linux"}
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		info.Problem = fmt.Sprintf("Landlock is not available in this kernel (%v); it needs Linux 5.13 or later with the landlock LSM enabled (lsm=...,landlock)", errno)
	} else {
		info.LandlockABI = int(abi)
	}
	// A PID and user namespace makes the command the init of its own
	// process tree: when it ends, or the daemon dies, the kernel kills
	// every process in it, setsid ones included, and the command keeps no
	// capability over the daemon's namespace (raw disks, /proc/kcore).
	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	cmd.SysProcAttr = namespaceAttr()
	if err := cmd.Run(); err != nil {
		info.NamespaceProblem = fmt.Sprintf("user and PID namespaces are not available (%v); "+
			"background processes of a command then die by process group only", err)
	} else {
		info.PIDNamespace = true
	}
	if info.PIDNamespace && info.LandlockABI > 0 {
		if err := probeInit(); err != nil {
			info.InitProblem = fmt.Sprintf("a command cannot hide the daemon's processes in its namespaces (%v)", err)
		}
	}
	cmd = exec.Command("/bin/sh", "-c", "exit 0")
	cmd.SysProcAttr = namespaceAttr()
	cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNET
	if err := cmd.Run(); err != nil {
		info.NetProblem = fmt.Sprintf("network namespaces are not available (%v)", err)
	} else {
		info.NetNamespace = true
	}
	return info
}

// probeInit runs `sh -c 'exit 0'` through a command's init (see
// sandboxinit_linux.go) without Landlock rules: it fails where the init
// cannot set up its mounts.
func probeInit() error {
	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	attr := namespaceAttr()
	spec, toInit, status, cleanup, err := viaInit(cmd, attr, nil, 0, false, nil, "")
	if err != nil {
		return err
	}
	cmd.SysProcAttr = attr
	err = cmd.Start()
	cleanup()
	if err != nil {
		closeAll(toInit, status)
		return err
	}
	go func() {
		_, _ = toInit.Write(spec)
		toInit.Close()
	}()
	msg, _ := io.ReadAll(status)
	status.Close()
	werr := cmd.Wait()
	if len(msg) > 0 {
		return errors.New(string(msg))
	}
	return werr
}

// namespaceAttr is the SysProcAttr of a command in new user and PID
// namespaces, keeping its uid and gid.
func namespaceAttr() *syscall.SysProcAttr {
	uid, gid := os.Getuid(), os.Getgid()
	return &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		GidMappingsEnableSetgroups: false,
	}
}

// landlockRule is one path rule of the sandbox.
type landlockRule struct {
	path   string
	access uint64
}

// sandboxRules lists the rules of a command's sandbox: read everywhere but
// the denied directories and /dev (apart from devAllowed); write under the
// workdir and the temp directories, except the denied ones; read the
// extra read-only directories (the session's kept outputs).
func sandboxRules(spec *sandboxSpec, abi int) []landlockRule {
	workdir, deny, guard := spec.workdir, spec.deny, spec.guard
	write := uint64(llWrite | llRead)
	if abi >= 2 {
		write |= llRefer
	}
	if abi >= 3 {
		write |= llTrunc
	}
	var rules []landlockRule
	add := func(root string, access uint64, deny []string) {
		rules = append(rules, grantExcept(root, access, deny, guard)...)
	}
	add("/", llRead, append([]string{"/dev"}, deny...))
	for _, d := range devAllowed {
		if _, err := os.Stat(d); err == nil {
			add(d, llRead|unix.LANDLOCK_ACCESS_FS_WRITE_FILE|(write&llTrunc), nil)
		}
	}
	// The forking thread, in the sandbox already, writes the child's
	// uid_map and gid_map; a command in the user namespace holds no
	// capability over the daemon's, so writes under /proc reach only
	// its own processes (the daemon's are out of Landlock's ptrace scope).
	if ProbeSandbox().PIDNamespace {
		add("/proc", llRead|unix.LANDLOCK_ACCESS_FS_WRITE_FILE, nil)
	}
	add(workdir, write, deny)
	for _, d := range append([]string{spec.tmp}, spec.writable...) {
		if d != "" {
			add(d, write, deny)
		}
	}
	seen := map[string]bool{}
	for _, t := range []string{os.TempDir(), "/tmp", "/var/tmp", "/dev/shm"} {
		if r, err := filepath.EvalSymlinks(t); err == nil && !seen[r] {
			seen[r] = true
			add(r, write, deny)
		}
	}
	for _, d := range spec.readOnly {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			rules = append(rules, landlockRule{path: r, access: llRead})
		}
	}
	return rules
}

// grantExcept returns rules granting access beneath root but not beneath
// any of deny: Landlock rules only add rights, so a directory holding a
// denied one is granted entry by entry instead, down to the denied one.
// Symlinks get no rule (what they point to is governed by its own path).
// Nor do the denied files met on the way under other names (hard links):
// a Landlock rule belongs to the inode, so it would open them by their
// own names too.
func grantExcept(root string, access uint64, deny []string, guard *snapshot) []landlockRule {
	root = filepath.Clean(root)
	inside := false
	for _, d := range deny {
		if within(d, root) {
			return nil // root is itself denied
		}
		if within(root, d) {
			inside = true
		}
	}
	fi, err := os.Lstat(root)
	if err != nil || fi.Mode()&os.ModeSymlink != 0 {
		return nil
	}
	if guard.byInode(fi) != "" {
		return nil
	}
	if !fi.IsDir() {
		return []landlockRule{{path: root, access: access & llFileOnly}}
	}
	if !inside {
		return []landlockRule{{path: root, access: access}}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var rules []landlockRule
	for _, e := range entries {
		rules = append(rules, grantExcept(filepath.Join(root, e.Name()), access, deny, guard)...)
	}
	return rules
}

type rulesetAttr struct {
	handledFS, handledNet, scoped uint64
}

type pathBeneathAttr struct {
	allowed uint64
	fd      int32
}

// restrictThread puts the calling OS thread (and every process it forks
// from now on) in a Landlock domain holding rules. The caller has locked
// its goroutine to the thread and never unlocks it, so the thread ends
// with the goroutine and the rest of the daemon stays unrestricted.
func restrictThread(rules []landlockRule, abi int) error {
	handled := uint64(llRead | llWrite | llDevices)
	if abi >= 2 {
		handled |= llRefer
	}
	if abi >= 3 {
		handled |= llTrunc
	}
	attr := rulesetAttr{handledFS: handled}
	size := unsafe.Sizeof(attr.handledFS)
	if abi >= 4 {
		size += unsafe.Sizeof(attr.handledNet)
	}
	if abi >= 6 {
		attr.scoped = llScopes
		size += unsafe.Sizeof(attr.scoped)
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return fmt.Errorf("landlock: create ruleset: %w", errno)
	}
	defer unix.Close(int(fd))
	for _, r := range rules {
		pfd, err := unix.Open(r.path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // gone meanwhile: nothing to grant
		}
		pb := pathBeneathAttr{allowed: r.access & handled, fd: int32(pfd)}
		_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&pb)), 0, 0, 0)
		unix.Close(pfd)
		if errno != 0 && !errors.Is(errno, unix.EBADFD) {
			return fmt.Errorf("landlock: rule for %s: %w", r.path, errno)
		}
	}
	// Needed without CAP_SYS_ADMIN, and right anyway: nothing the command
	// runs can gain privileges (setuid binaries run as the caller).
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("landlock: no_new_privs: %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("landlock: restrict: %w", errno)
	}
	return nil
}

// startCommand starts cmd on an OS thread of its own, sandboxed as spec
// says, without network (a network namespace of its own) when noNet, with SIGKILL as its parent-death signal: the kernel sends it when
// the thread that forked the command ends, so the thread is kept until the
// command has been waited for, and it dies with the daemon. The returned
// channel yields cmd.Wait's result.
func startCommand(cmd *exec.Cmd, spec *sandboxSpec, noNet bool) (<-chan error, error) {
	info := ProbeSandbox()
	attr := &syscall.SysProcAttr{}
	if info.PIDNamespace {
		attr = namespaceAttr()
	}
	slirp := ""
	if spec != nil && !noNet && info.PIDNamespace && info.NetNamespace {
		slirp = spec.slirp
	}
	if noNet || slirp != "" {
		if !info.NetNamespace {
			return nil, errors.New(info.NetProblem)
		}
		attr.Cloneflags |= syscall.CLONE_NEWNET
	}
	attr.Setpgid = true
	attr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr = attr
	var rules []landlockRule
	if spec != nil {
		if info.LandlockABI == 0 {
			return nil, errors.New(info.Problem)
		}
		rules = sandboxRules(spec, info.LandlockABI)
	}
	// With namespaces, the command's init sets up the sandbox inside them
	// (a /proc of its own first, then Landlock: see sandboxinit_linux.go);
	// without, the forking thread takes the Landlock domain itself.
	var initSpec []byte
	var toInit, status *os.File
	cleanup := func() {}
	if spec != nil && info.PIDNamespace {
		var err error
		resolv := ""
		if slirp != "" && spec.tmp != "" {
			resolv = filepath.Join(spec.tmp, resolvConfName)
		}
		if initSpec, toInit, status, cleanup, err = viaInit(cmd, attr, rules, info.LandlockABI, noNet || slirp != "", spec.ports, resolv); err != nil {
			return nil, err
		}
	}
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		// Never unlocked: the thread carries the sandbox and must live as
		// long as the command (Pdeathsig), then ends with this goroutine.
		runtime.LockOSThread()
		if spec != nil && toInit == nil {
			if err := restrictThread(rules, info.LandlockABI); err != nil {
				started <- err
				return
			}
			if spec.ports != nil {
				if err := restrictPorts(int(spec.ports.Fd())); err != nil {
					started <- err
					return
				}
			}
		}
		err := cmd.Start()
		cleanup() // the init's ends of its pipes: the child has its own
		if err != nil {
			if toInit != nil {
				closeAll(toInit, status)
			}
			started <- err
			return
		}
		stopSlirp := func() {}
		if slirp != "" {
			// The init waits for its spec: the command starts once its
			// network is there.
			if stopSlirp, err = startSlirp(slirp, cmd.Process.Pid); err != nil {
				_ = cmd.Process.Kill()
				closeAll(toInit, status)
				_ = cmd.Wait()
				started <- &SandboxSetupError{Msg: "the command's network: " + err.Error()}
				return
			}
		}
		if toInit != nil {
			go func() {
				_, _ = toInit.Write(initSpec)
				toInit.Close()
			}()
			// Nothing arrives once the command runs (the pipe closes
			// on exec); a message means the init gave up, and exits.
			msg, _ := io.ReadAll(status)
			status.Close()
			if len(msg) > 0 {
				_ = cmd.Wait()
				stopSlirp()
				started <- &SandboxSetupError{Msg: string(msg)}
				return
			}
		}
		started <- nil
		err = cmd.Wait()
		stopSlirp()
		exited <- err
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

// slirpWait bounds the wait for slirp4netns to set the command's network up.
const slirpWait = 5 * time.Second

// startSlirp gives the network namespace of process pid (the command's
// init, waiting for its spec) outbound network through slirp4netns: a
// tap device with 10.0.2.100/24 and the default route, in user mode, so
// that connections leave from the daemon's network namespace as the
// daemon's own would, except to the host's loopback
// (--disable-host-loopback: 10.0.2.2 is refused; 127.0.0.1 is the
// namespace's own loopback). It returns once the network is up; stop ends
// slirp4netns (call it once the command has exited). slirp4netns dies with
// the thread that started it (Pdeathsig), which is the command's.
func startSlirp(path string, pid int) (stop func(), err error) {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	exitR, exitW, err := os.Pipe()
	if err != nil {
		closeAll(readyR, readyW)
		return nil, err
	}
	p := strconv.Itoa(pid)
	c := exec.Command(path, "--configure", "--mtu=65520", "--disable-host-loopback",
		"--userns-path=/proc/"+p+"/ns/user", "--ready-fd=3", "--exit-fd=4", p, "tap0")
	c.ExtraFiles = []*os.File{readyW, exitR}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	c.Stderr = &stderr
	err = c.Start()
	closeAll(readyW, exitR)
	if err != nil {
		closeAll(readyR, exitW)
		return nil, err
	}
	ready := make(chan error, 1)
	go func() {
		b := make([]byte, 1)
		_, err := readyR.Read(b)
		ready <- err
	}()
	stop = func() {
		exitW.Close()
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Second):
			_ = c.Process.Kill()
			<-done
		}
		readyR.Close()
	}
	t := time.NewTimer(slirpWait)
	defer t.Stop()
	select {
	case err = <-ready:
	case <-t.C:
		err = fmt.Errorf("not ready within %v", slirpWait)
	}
	if err != nil {
		stop()
		return nil, fmt.Errorf("slirp4netns: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stop, nil
}

// slirpPath returns the slirp4netns executable commands get their network
// through in accept and auto modes, "" when it is not installed (commands
// then use the host's network, minus the control plane's ports).
func slirpPath() string {
	if testNoSlirp {
		return ""
	}
	slirpOnce.Do(func() {
		if p, err := exec.LookPath("slirp4netns"); err == nil {
			slirpExe = p
		}
	})
	return slirpExe
}

var (
	slirpOnce sync.Once
	slirpExe  string
	// testNoSlirp makes commands use the fallback, as without slirp4netns.
	testNoSlirp bool
)
