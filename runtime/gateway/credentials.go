package gateway

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

var refName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// SecretsDir is where secret:NAME credentials live under the daemon's home.
func SecretsDir(home string) string { return filepath.Join(home, "secrets", "gateway") }

// resolveCredential returns the value a credentials reference names. Errors
// name the reference, never its value.
func (s *Service) resolveCredential(ref string) (string, error) {
	if refName.MatchString(ref) {
		return s.resolveName(ref)
	}
	kind, name, ok := strings.Cut(ref, ":")
	if !ok || !refName.MatchString(name) {
		return "", errs.New(errcode.InvalidParams, "credentialsRef %q: want env:NAME, secret:NAME or NAME (NAME of letters, digits, _ . -)", ref)
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
	return "", errs.New(errcode.InvalidParams, "credentialsRef %q: want env:NAME, secret:NAME or NAME", ref)
}

// resolveName resolves a bare NAME, snowpea's form ("telegram", also
// agent.bindChannel's default: the platform): the first of the secret file
// NAME, the environment's TRELLIS_<NAME>_TOKEN and <NAME>_BOT_TOKEN (the
// bots' usual TELEGRAM_BOT_TOKEN, SLACK_BOT_TOKEN) that is there.
func (s *Service) resolveName(name string) (string, error) {
	if _, err := os.Stat(filepath.Join(SecretsDir(s.opts.Home), name)); err == nil {
		return s.resolveCredential("secret:" + name)
	}
	upper := strings.Map(func(r rune) rune {
		if r == '.' || r == '-' {
			return '_'
		}
		return unicode.ToUpper(r)
	}, name)
	for _, env := range []string{"TRELLIS_" + upper + "_TOKEN", upper + "_BOT_TOKEN"} {
		if v := strings.TrimSpace(s.opts.Getenv(env)); v != "" {
			return v, nil
		}
	}
	return "", errs.New(errcode.InvalidParams, "credentialsRef %q: no credential of that name: place it in the secret file %s (mode 0600), or set TRELLIS_%s_TOKEN or %s_BOT_TOKEN in the daemon's environment (or name one as env:NAME or secret:NAME)",
		name, filepath.Join(SecretsDir(s.opts.Home), name), upper, upper)
}

// pathErrOnly keeps the reason of a file error without repeating the path.
func pathErrOnly(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return fmt.Errorf("%v", err)
}
