// Package testbin builds the project's binaries (trellisd, trellis) for
// tests that run them as processes, once per `go test` run rather than once
// per test package: the binary is keyed by the build cache's content hashes
// of every package it links, so that test
// packages running in parallel or one after another share one link, and a
// rerun with unchanged sources links nothing.
//
// An environment variable naming a prebuilt binary ($TRELLISD_BIN,
// $TRELLIS_BIN) wins, as in .ci/run. FreePort finds a port for a daemon
// such a test starts on a port of its choosing.
package testbin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Binary names a main package and the variable that may name it prebuilt.
type Binary struct {
	Name string // file name: trellisd
	Pkg  string // import path: github.com/trellis-run/trellis/cmd/trellisd
	Env  string // TRELLISD_BIN
}

var (
	// Trellisd is the daemon.
	Trellisd = Binary{Name: "trellisd", Pkg: "github.com/trellis-run/trellis/cmd/trellisd", Env: "TRELLISD_BIN"}
	// Trellis is the CLI.
	Trellis = Binary{Name: "trellis", Pkg: "github.com/trellis-run/trellis/cmd/trellis", Env: "TRELLIS_BIN"}
)

// A later build removes the shared binaries unused for unusedFor, and all
// but the keep most recently used ones (a link is ~130 MB, and the temp
// directory is shared by every checkout on the machine), but never one a
// running test process holds.
const (
	unusedFor = 30 * time.Minute
	keep      = 8
)

var (
	mu    sync.Mutex
	built = map[string]string{}
	// held keeps a shared lock on each binary this process uses until it
	// exits: another process's cleanup removes only binaries no running
	// test process holds.
	held []*os.File
)

// Path returns the path of b's binary, building it when no current one
// exists. Safe for concurrent use, within and across processes.
func Path(b Binary) (string, error) {
	if p := os.Getenv(b.Env); p != "" {
		return p, nil
	}
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[b.Pkg]; ok {
		return p, nil
	}
	p, err := build(b)
	if err != nil {
		return "", err
	}
	built[b.Pkg] = p
	return p, nil
}

// build links b into the shared directory under its content key, unless a
// binary with that key is there already.
func build(b Binary) (string, error) {
	key, err := contentKey(b.Pkg)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("trellis-testbin-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	// One builder at a time across processes; the others wait and reuse.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	path := filepath.Join(dir, b.Name+"-"+key)
	now := time.Now()
	if _, err := os.Stat(path); err == nil {
		_ = os.Chtimes(path, now, now) // in use: kept by the cleanup below
		return path, hold(path)
	}
	tmp := path + ".tmp"
	out, err := exec.Command("go", "build", "-o", tmp, b.Pkg).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("build %s: %v\n%s", b.Pkg, err, out)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	if err := hold(path); err != nil {
		return "", err
	}
	removeUnused(dir, now)
	return path, nil
}

// hold takes a shared lock on the binary at path for the rest of this
// process, so that no other process's removeUnused deletes it while this
// one's tests still run it.
func hold(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return err
	}
	held = append(held, f)
	return nil
}

// contentKey hashes the build cache's files of every package pkg links
// (go list -deps -export): each is named by the hash of its compiled
// content, so the key changes with any source file, dependency, toolchain
// or build flag that changes the binary.
func contentKey(pkg string) (string, error) {
	cmd := exec.Command("go", "list", "-deps", "-export", "-f", "{{.ImportPath}} {{.Export}}", pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -deps -export %s: %v\n%s", pkg, err, stderr.String())
	}
	if !bytes.Contains(out, []byte(pkg+" /")) {
		return "", fmt.Errorf("go list -deps -export %s: no export file for the package itself", pkg)
	}
	sum := sha256.Sum256(out)
	return hex.EncodeToString(sum[:8]), nil
}

// removeUnused deletes the binaries of dir that no test used for unusedFor,
// and all but the keep most recently used.
func removeUnused(dir string, now time.Time) {
	entries, _ := os.ReadDir(dir)
	type bin struct {
		path string
		used time.Time
	}
	var bins []bin
	for _, e := range entries {
		if e.Name() == ".lock" || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if info, err := e.Info(); err == nil {
			bins = append(bins, bin{filepath.Join(dir, e.Name()), info.ModTime()})
		}
	}
	sort.Slice(bins, func(i, j int) bool { return bins[i].used.After(bins[j].used) })
	for i, b := range bins {
		if i >= keep || now.Sub(b.used) > unusedFor {
			removeIfUnheld(b.path)
		}
	}
}

// removeIfUnheld deletes the binary at path unless a process (this one
// included) holds it (see hold).
func removeIfUnheld(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return // a running test process uses it
	}
	os.Remove(path)
}
