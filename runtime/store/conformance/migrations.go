package conformance

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// breaking are the statements a migration may not hold: a rolling upgrade
// runs daemons of the previous build on the migrated schema, so a
// migration only adds (docs/deploy.md, Upgrades).
var breaking = []struct {
	re  *regexp.Regexp
	why string
}{
	{regexp.MustCompile(`(?i)\bDROP\s+(TABLE|COLUMN|VIEW)\b`), "drops what the previous build reads"},
	{regexp.MustCompile(`(?i)\bRENAME\b`), "renames what the previous build names"},
	{regexp.MustCompile(`(?i)\bALTER\s+COLUMN\b`), "changes a column the previous build writes"},
}

// addNotNull matches an added column that is NOT NULL: it needs a DEFAULT,
// or the previous build's inserts (which do not name it) fail.
var addNotNull = regexp.MustCompile(`(?is)\bADD\s+COLUMN\b[^;,]*?\bNOT\s+NULL\b[^;,]*`)

// MigrationsOnlyAdd fails for a migration in dir of fsys that drops,
// renames or alters what exists, or adds a NOT NULL column without a
// default.
func MigrationsOnlyAdd(t *testing.T, fsys fs.FS, dir string) {
	t.Helper()
	names, err := fs.Glob(fsys, dir+"/*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("no migrations in %s: %v", dir, err)
	}
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			t.Fatal(err)
		}
		sql := stripComments(string(b))
		for _, r := range breaking {
			if m := r.re.FindString(sql); m != "" {
				t.Errorf("%s: %q %s: a migration only adds (docs/deploy.md, Upgrades)", n, m, r.why)
			}
		}
		for _, m := range addNotNull.FindAllString(sql, -1) {
			if !strings.Contains(strings.ToUpper(m), "DEFAULT") {
				t.Errorf("%s: %q adds a NOT NULL column without a default: the previous build's inserts would fail", n, strings.TrimSpace(m))
			}
		}
	}
}

func stripComments(sql string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(sql, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}
