package daemon

import (
	"bufio"
	"bytes"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/trellis-run/trellis/runtime/tool"
)

// guard returns what no tool may touch: the daemon's home, the secret
// files it reads from elsewhere (a shared token file, the secrets key, the
// MCP config with its servers' keys), the database's password and key
// files (~/.pgpass and its relatives, whatever the store: a command that
// read them could reach the database and the cluster token in it), the
// registry of homes, and every home in it (the user's other daemons).
func guard(cfg Config) *tool.Guard {
	g := tool.NewGuard(cfg.Home)
	g.Protect("the daemon's token file", cfg.TokenFile)
	g.Protect("the daemon's secrets key file", cfg.SecretsKeyFile)
	g.Protect("the daemon's MCP configuration (it may hold the servers' keys)", cfg.MCPConfig)
	g.Protect("the daemon's TLS key", cfg.TLSKey)
	g.Protect("a PostgreSQL password, service or key file", postgresSecretFiles(cfg.Store)...)
	if reg := homesRegistry(); reg != "" {
		g.Protect("the registry of Trellis daemons' homes", reg)
		self := cfg.Home
		g.ProtectOthers(func() []string {
			homes := readHomes(reg)
			return slices.DeleteFunc(homes, func(h string) bool { return h == self })
		})
	}
	return g
}

// linkedSecrets returns the protected files (the token, keys, password
// files) that have other names: a command could read one through a hard
// link outside the protected paths (Landlock grants by path), so the
// daemon says so at start.
func linkedSecrets(cfg Config) []string {
	files := []string{TokenPath(cfg.Home), cfg.TokenFile, cfg.SecretsKeyFile, cfg.TLSKey, cfg.MCPConfig}
	files = append(files, postgresSecretFiles(cfg.Store)...)
	var out []string
	for _, f := range files {
		if f == "" {
			continue
		}
		fi, err := os.Lstat(f)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			out = append(out, f)
		}
	}
	return out
}

// controlPorts are the TCP ports commands may not connect to: the
// daemon's HTTP, gRPC and gateway ports and the database's (every host of
// the DSN), minus those the operator allowed (--command-allow-ports).
func controlPorts(cfg Config, daemonPorts ...int) []int {
	ports := append([]int(nil), daemonPorts...)
	if cfg.storeKind() == "postgres" {
		ports = append(ports, postgresPorts(cfg.Store)...)
	}
	ports = slices.DeleteFunc(ports, func(p int) bool { return p <= 0 || slices.Contains(cfg.CommandAllowPorts, p) })
	slices.Sort(ports)
	return slices.Compact(ports)
}

// postgresSecretFiles lists the files libpq and pgx read passwords and
// client keys from: $PGPASSFILE or ~/.pgpass, $PGSERVICEFILE or
// ~/.pg_service.conf, ~/.postgresql (client certificates and keys), and
// those the DSN names (passfile, servicefile, sslkey, sslcert).
func postgresSecretFiles(dsn string) []string {
	var homes []string
	if h, err := os.UserHomeDir(); err == nil {
		homes = append(homes, h)
	}
	if u, err := user.Current(); err == nil && u.HomeDir != "" {
		homes = append(homes, u.HomeDir)
	}
	var out []string
	for _, h := range homes {
		out = append(out, filepath.Join(h, ".pgpass"), filepath.Join(h, ".pg_service.conf"), filepath.Join(h, ".postgresql"))
	}
	for _, env := range []string{"PGPASSFILE", "PGSERVICEFILE", "PGSSLKEY", "PGSSLCERT"} {
		if v := os.Getenv(env); v != "" {
			out = append(out, v)
		}
	}
	for k, v := range dsnParams(dsn) {
		switch k {
		case "passfile", "servicefile", "sslkey", "sslcert":
			out = append(out, v)
		}
	}
	return out
}

// dsnParams returns the parameters of a URL or keyword=value DSN.
func dsnParams(dsn string) map[string]string {
	out := map[string]string{}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if u, err := url.Parse(dsn); err == nil {
			for k, v := range u.Query() {
				if len(v) > 0 {
					out[k] = v[0]
				}
			}
		}
		return out
	}
	for _, f := range strings.Fields(dsn) {
		if k, v, ok := strings.Cut(f, "="); ok {
			out[k] = strings.Trim(v, "'")
		}
	}
	return out
}

// homesRegistry is the file listing the homes of the daemons this user
// started (<config dir>/trellis/homes), "" when there is no config dir.
func homesRegistry() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "trellis", "homes")
}

// registerHome adds home to the registry, dropping homes that no longer
// exist, under an exclusive lock (daemons start concurrently).
func registerHome(home string) error {
	reg := homesRegistry()
	if reg == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(reg), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(reg, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	homes := readHomes(reg)
	keep := []string{home}
	for _, h := range homes {
		if _, err := os.Stat(h); err == nil && h != home {
			keep = append(keep, h)
		}
	}
	slices.Sort(keep)
	var b bytes.Buffer
	for _, h := range keep {
		b.WriteString(h + "\n")
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err = f.WriteAt(b.Bytes(), 0)
	return err
}

// readHomes returns the homes the registry lists.
func readHomes(reg string) []string {
	b, err := os.ReadFile(reg)
	if err != nil {
		return nil
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if h := strings.TrimSpace(sc.Text()); filepath.IsAbs(h) {
			out = append(out, h)
		}
	}
	return out
}
