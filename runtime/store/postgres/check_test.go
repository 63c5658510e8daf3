package postgres

import (
	"strings"
	"testing"
)

func TestRedactDSN(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://alice:s3cret@db:5432/app?sslmode=disable":     "postgres://alice@db:5432/app?sslmode=disable",
		"postgresql://alice@db/app?password=s3cret&search_path=t": "postgresql://alice@db/app?search_path=t",
		"host=db user=alice password=s3cret dbname=app":           "host=db user=alice password=… dbname=app",
		"host=db password = 'se cr\\'et' dbname=app":              "host=db password=… dbname=app",
		"postgres://bob@db/app":                                   "postgres://bob@db/app",
	} {
		got := RedactDSN(in)
		if got != want || strings.Contains(got, "s3cret") || strings.Contains(got, "cr") && strings.Contains(in, "se cr") {
			t.Errorf("RedactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}
