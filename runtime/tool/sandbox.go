package tool

import "os"

// SandboxInfo says what the command sandbox uses on this system.
type SandboxInfo struct {
	// Platform is runtime.GOOS.
	Platform string
	// LandlockABI is the kernel's Landlock ABI version; 0 when Landlock is
	// unavailable, and then Problem says why.
	LandlockABI int
	Problem     string
	// PIDNamespace is true when commands run in user and PID namespaces of
	// their own; else NamespaceProblem says why not.
	PIDNamespace     bool
	NamespaceProblem string
	// NetNamespace is true when commands can also get a network namespace
	// of their own (no interface but a loopback of their own); else
	// NetProblem says why not.
	NetNamespace bool
	NetProblem   string
	// InitProblem says why a command's init cannot set up its namespaces
	// (a /proc of its own, or the daemon's entry covered); "" when it can
	// or no namespaces are used. Commands are then not run.
	InitProblem string
}

// Available reports whether commands can be sandboxed.
func (i SandboxInfo) Available() bool { return i.LandlockABI > 0 }

// sandboxSpec is what one command may touch.
type sandboxSpec struct {
	workdir  string    // read and write
	tmp      string    // read and write: the command's own TMPDIR
	writable []string  // read and write too (a helper process's caches)
	readOnly []string  // read only (the session's kept outputs)
	deny     []string  // nothing (the daemon's home, its secrets), even inside the above
	guard    *snapshot // the protected files, whatever their name
	ports    *os.File  // a Landlock ruleset refusing some TCP ports; nil: none
	// slirp, when set, is the slirp4netns executable giving the command
	// outbound network from a network namespace of its own, where the
	// host's loopback cannot be reached ("": the host's network itself).
	slirp string
}

// SandboxSetupError: a command's sandbox could not be set up inside its
// namespaces; the command did not run.
type SandboxSetupError struct{ Msg string }

func (e *SandboxSetupError) Error() string { return "sandbox setup: " + e.Msg }

// slirp4netns's DNS forwarder in the command's network namespace; the
// resolv.conf pointing at it is written in the command's temp dir.
const (
	slirpDNS       = "10.0.2.3"
	resolvConfName = "resolv.conf"
)
