package main

import (
	"strings"
	"testing"
)

// TestSummarize pins the summary of a run with a pass, a skip with its
// reason and a failure with its output.
func TestSummarize(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"pass","Package":"p","Test":"TestA","Elapsed":0.1}`,
		`{"Action":"run","Package":"p","Test":"TestPG"}`,
		`{"Action":"output","Package":"p","Test":"TestPG","Output":"=== RUN   TestPG\n"}`,
		`{"Action":"output","Package":"p","Test":"TestPG","Output":"    pg_test.go:12: PostgreSQL tests need a server\n"}`,
		`{"Action":"output","Package":"p","Test":"TestPG","Output":"--- SKIP: TestPG (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestPG"}`,
		`{"Action":"output","Package":"p","Test":"TestBad","Output":"    bad_test.go:3: boom\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestBad"}`,
		`{"Action":"fail","Package":"p","Elapsed":1.5}`,
		`{"Action":"pass","Package":"q","Elapsed":0.5}`,
	}, "\n")
	var out strings.Builder
	code := summarize(strings.NewReader(in), &out)
	want := `--- FAIL: p.TestBad
        bad_test.go:3: boom
FAIL p 1.5s
ok   q 0.5s

tests: 1 passed, 1 failed, 1 skipped
  skipped p TestPG: PostgreSQL tests need a server
`
	if code != 1 || out.String() != want {
		t.Fatalf("exit %d, output:\n%s\nwant:\n%s", code, out.String(), want)
	}
}
