package gateway

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

var refName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// SecretsDir is where secret:NAME credentials live under the daemon's home.
func SecretsDir(home string) string { return filepath.Join(home, "secrets", "gateway") }

// resolveCredential returns the value a credentials reference names. Errors
// name the reference, never its value.
func (s *Service) resolveCredential(ref string) (string, error) {
	kind, name, ok := strings.Cut(ref, ":")
	if !ok || !refName.MatchString(name) {
		return "", errs.New(errcode.InvalidParams, "credentialsRef %q: want env:NAME or secret:NAME (NAME of letters, digits, _ . -)", ref)
	}
	switch kind {
	case "env":
		v := strings.TrimSpace(s.opts.Getenv(name))
		if v == "" {
			return "", errs.New(errcode.InvalidParams, "credentialsRef %q: the daemon's environment has no %s (or it is empty)", ref, name)
		}
		return v, nil
	case "secret":
		path := filepath.Join(SecretsDir(s.opts.Home), name)
		st, err := os.Stat(path)
		if err != nil {
			return "", errs.New(errcode.InvalidParams, "credentialsRef %q: no secret file %s; place it there with mode 0600", ref, path)
		}
		if st.Mode().Perm()&0o077 != 0 {
			return "", errs.New(errcode.InvalidParams, "credentialsRef %q: secret file %s has mode %04o; it must be 0600 (chmod 600 it)", ref, path, st.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", errs.New(errcode.InvalidParams, "credentialsRef %q: cannot read %s: %v", ref, path, pathErrOnly(err))
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", errs.New(errcode.InvalidParams, "credentialsRef %q: secret file %s is empty", ref, path)
		}
		return v, nil
	}
	return "", errs.New(errcode.InvalidParams, "credentialsRef %q: want env:NAME or secret:NAME", ref)
}

// pathErrOnly keeps the reason of a file error without repeating the path.
func pathErrOnly(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return fmt.Errorf("%v", err)
}
