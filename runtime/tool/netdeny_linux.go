//go:build linux

package tool

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock (ABI 4) filters TCP connections by port, with an allow-list
// only: to refuse a few ports (the database's, the daemon's own), a
// ruleset allows every other one. Building it takes tens of thousands of
// rules, so it is built once per set of ports and every command stacks it
// on its own (file) domain.

const llRuleNetPort = 2 // LANDLOCK_RULE_NET_PORT

type netPortAttr struct {
	allowed uint64
	port    uint64
}

var netRulesets struct {
	sync.Mutex
	byPorts map[string]*os.File
}

// denyPortsRuleset returns a Landlock ruleset refusing TCP connections to
// ports (on any address) and allowing every other port; nil when the
// kernel cannot filter connections (Landlock ABI < 4) or ports is empty.
func denyPortsRuleset(ports []int) (*os.File, error) {
	if ProbeSandbox().LandlockABI < 4 || len(ports) == 0 {
		return nil, nil
	}
	ports = slices.Clone(ports)
	slices.Sort(ports)
	ports = slices.Compact(ports)
	var key strings.Builder
	for _, p := range ports {
		key.WriteString(strconv.Itoa(p) + ",")
	}
	netRulesets.Lock()
	defer netRulesets.Unlock()
	if f := netRulesets.byPorts[key.String()]; f != nil {
		return f, nil
	}
	attr := rulesetAttr{handledNet: unix.LANDLOCK_ACCESS_NET_CONNECT_TCP}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr.handledFS)+unsafe.Sizeof(attr.handledNet), 0)
	if errno != 0 {
		return nil, fmt.Errorf("landlock: create the port ruleset: %w", errno)
	}
	for p := 0; p <= 65535; p++ {
		if _, denied := slices.BinarySearch(ports, p); denied {
			continue
		}
		a := netPortAttr{allowed: unix.LANDLOCK_ACCESS_NET_CONNECT_TCP, port: uint64(p)}
		if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, llRuleNetPort, uintptr(unsafe.Pointer(&a)), 0, 0, 0); errno != 0 {
			unix.Close(int(fd))
			return nil, fmt.Errorf("landlock: allow port %d: %w", p, errno)
		}
	}
	f := os.NewFile(fd, "landlock-ports") // close-on-exec, as Landlock makes it
	if netRulesets.byPorts == nil {
		netRulesets.byPorts = map[string]*os.File{}
	}
	netRulesets.byPorts[key.String()] = f
	return f, nil
}

// restrictPorts stacks the port ruleset fd on the calling thread's domain
// (no_new_privs is set already).
func restrictPorts(fd int) error {
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0); errno != 0 {
		return fmt.Errorf("landlock: restrict ports: %w", errno)
	}
	return nil
}
