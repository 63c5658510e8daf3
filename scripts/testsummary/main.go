// Command testsummary reads `go test -json` output on stdin and prints what
// a person needs from it: each package's result, the output of every failed
// test, and a closing summary that names every skipped test with its
// reason, so that a suite skipped for want of an environment (PostgreSQL,
// buf, tmux, a browser) is visible. It exits 1 when anything failed.
//
//	go test -json ./... | go run ./scripts/testsummary
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

type key struct{ pkg, test string }

func main() {
	os.Exit(summarize(os.Stdin, os.Stdout))
}

func summarize(in io.Reader, out io.Writer) int {
	output := map[key][]string{}
	var failed, skipped []key
	passed := 0
	bad := false
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(out, sc.Text()) // a build error, printed as it came
			bad = true
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "output":
			output[k] = append(output[k], e.Output)
		case "pass":
			if e.Test == "" {
				fmt.Fprintf(out, "ok   %s %.1fs\n", e.Package, e.Elapsed)
			} else {
				passed++
			}
			delete(output, k)
		case "skip":
			if e.Test == "" {
				fmt.Fprintf(out, "skip %s (no tests)\n", e.Package)
			} else {
				skipped = append(skipped, k)
			}
		case "fail":
			bad = true
			if e.Test == "" {
				fmt.Fprintf(out, "FAIL %s %.1fs\n", e.Package, e.Elapsed)
				if _, any := output[k]; any && !hasFailedTest(failed, e.Package) {
					fmt.Fprint(out, indent(output[k])) // the package did not build or TestMain failed
				}
			} else {
				failed = append(failed, k)
				fmt.Fprintf(out, "--- FAIL: %s.%s\n%s", e.Package, e.Test, indent(output[k]))
			}
		}
	}
	sort.Slice(skipped, func(i, j int) bool {
		return skipped[i].pkg+skipped[i].test < skipped[j].pkg+skipped[j].test
	})
	fmt.Fprintf(out, "\ntests: %d passed, %d failed, %d skipped\n", passed, len(failed), len(skipped))
	for _, k := range skipped {
		fmt.Fprintf(out, "  skipped %s %s: %s\n", k.pkg, k.test, skipReason(output[k]))
	}
	if bad {
		return 1
	}
	return 0
}

func hasFailedTest(failed []key, pkg string) bool {
	for _, k := range failed {
		if k.pkg == pkg {
			return true
		}
	}
	return false
}

// skipReason is the t.Skip message among a skipped test's output lines.
func skipReason(lines []string) string {
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		if _, msg, ok := strings.Cut(l, ": "); ok && strings.Contains(l, "_test.go:") {
			return msg
		}
		return l
	}
	return "(no reason given)"
}

func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		if strings.HasPrefix(l, "=== ") {
			continue
		}
		b.WriteString("    " + l)
		if !strings.HasSuffix(l, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}
