// Command gen writes a self-signed test certificate for 127.0.0.1 and
// localhost and its key (testcert.Write), for the tests that are not
// written in Go: the SDK's and the web console's over wss://.
//
//	go run ./internal/testcert/gen CERT_FILE KEY_FILE
package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/trellis-run/trellis/internal/testcert"
)

// fatalTB is the testing.TB that testcert.Write uses: Helper and Fatal,
// which ends the command.
type fatalTB struct{ testing.TB }

func (fatalTB) Helper() {}

func (fatalTB) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"gen:"}, args...)...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: go run ./internal/testcert/gen CERT_FILE KEY_FILE")
		os.Exit(2)
	}
	testcert.Write(fatalTB{}, os.Args[1], os.Args[2])
}
