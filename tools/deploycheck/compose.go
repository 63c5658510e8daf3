package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// secretsDir is where a container finds its compose secrets.
const secretsDir = "/run/secrets/"

// composeProject is a loaded compose file and what the checks found in it.
type composeProject struct {
	project  *types.Project
	daemons  []string          // the daemons' services, by name
	files    map[string]string // secret name → its file, under the -secrets directory
	balancer string            // the load balancer's service
}

// checkCompose loads file with compose-go (the Compose Specification's
// schema on, as docker compose loads it) and checks it. The secret files it
// names under its ./secrets directory are read from secrets instead.
func checkCompose(file, secrets string) (*composeProject, error) {
	opts, err := cli.NewProjectOptions([]string{file},
		// Only the file's own defaults: the checking machine's environment
		// must not change what is checked.
		cli.WithEnv(nil),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		return nil, err
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	p := &composeProject{project: project, files: map[string]string{}}
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }

	for name, s := range project.Secrets {
		if s.File == "" {
			add("secret %s: not a file (the daemons read their secrets from files)", name)
			continue
		}
		local := filepath.Join(secrets, filepath.Base(s.File))
		if st, err := os.Stat(local); err != nil || st.Size() == 0 {
			add("secret %s: its file %s is missing or empty in %s (gen-secrets.sh makes it)", name, filepath.Base(s.File), secrets)
			continue
		}
		p.files[name] = local
	}

	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range project.Services {
			if !yield(n) {
				return
			}
		}
	}) {
		s := project.Services[name]
		if _, ok := flagValue(s.Command, "home"); ok {
			p.daemons = append(p.daemons, name)
		}
	}
	if len(p.daemons) < 2 {
		add("%d daemon services (a command with --home): a cluster has at least 2", len(p.daemons))
	}
	homes := map[string]string{}
	var store string
	for _, name := range p.daemons {
		for _, problem := range p.checkDaemon(name, homes, &store) {
			add("service %s: %s", name, problem)
		}
	}
	p.balancer, problems = p.checkBalancer(filepath.Dir(file), problems)
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s:\n  %s", file, strings.Join(problems, "\n  "))
	}
	return p, nil
}

// checkDaemon checks one daemon's service. homes maps the named volumes
// already mounted as a home to their service; store is the first daemon's
// DSN, which every daemon must share.
func (p *composeProject) checkDaemon(name string, homes map[string]string, store *string) []string {
	s := p.project.Services[name]
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	args := s.Command

	if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) < 2 || s.HealthCheck.Test[0] == "NONE" {
		add("no healthcheck: the load balancer and depends_on wait for a healthy daemon")
	}
	home, _ := flagValue(args, "home")
	var volume string
	for _, v := range s.Volumes {
		if v.Target == home && v.Type == types.VolumeTypeVolume && v.Source != "" {
			volume = v.Source
		}
	}
	switch {
	case volume == "":
		add("its home %s is not on a named volume: a daemon's id, logs and outputs must survive the container", home)
	case homes[volume] != "":
		add("its home volume %s is %s's too: two daemons never share a home", volume, homes[volume])
	default:
		homes[volume] = name
	}

	dsn := envValue(s.Environment, "TRELLIS_STORE")
	if v, ok := flagValue(args, "store"); ok {
		dsn = v
	}
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		add("store %q: the daemons of a cluster share a postgres:// store", dsn)
	} else if *store == "" {
		*store = dsn
	} else if dsn != *store {
		add("store %q differs from the other daemons' %q", dsn, *store)
	}

	if _, ok := flagValue(args, "insecure-no-tls"); ok {
		add("--insecure-no-tls: the daemons serve the network between them and the load balancer with TLS")
	}
	if _, ok := flagValue(args, "token-file"); ok {
		add("--token-file: the daemon restricts its token file's mode at start, which a read-only secret refuses; the token is shared through the database")
	}
	for _, f := range []string{"tls-cert", "tls-key", "cluster-ca", "cluster-cert", "cluster-key", "secrets-key-file"} {
		if _, ok := flagValue(args, f); !ok {
			add("no --%s", f)
		}
	}
	targets := p.secretTargets(s)
	for _, f := range fileFlags {
		if v, ok := flagValue(args, f); ok && strings.HasPrefix(v, secretsDir) {
			if _, ok := targets[v]; !ok {
				add("--%s %s: no secret of the service is mounted there", f, v)
			}
		}
	}
	if v := envValue(s.Environment, "PGPASSFILE"); strings.HasPrefix(v, secretsDir) {
		if _, ok := targets[v]; !ok {
			add("PGPASSFILE %s: no secret of the service is mounted there", v)
		}
	}

	// The advertise address: the daemon's own name on the compose network
	// and its gRPC port; its cluster certificate must be made for that name.
	adv, _ := flagValue(args, "advertise")
	host, port, err := net.SplitHostPort(adv)
	grpcPort, _ := flagValue(args, "grpc-port")
	switch {
	case err != nil:
		add("--advertise %q: want the service's name and its --grpc-port", adv)
	case host != name && host != s.Hostname:
		add("--advertise %s: the other daemons reach this one as %s", adv, name)
	case port != grpcPort:
		add("--advertise %s: its port is not --grpc-port %s", adv, grpcPort)
	default:
		ca, _ := flagValue(args, "cluster-ca")
		cert, _ := flagValue(args, "cluster-cert")
		if err := verifyClusterCert(targets[ca], targets[cert], host); err != nil {
			add("cluster certificate: %v", err)
		}
	}

	lease := 10 * time.Second
	if v, ok := flagValue(args, "lease"); ok {
		if lease, err = time.ParseDuration(v); err != nil {
			add("--lease %q: %v", v, err)
		}
	}
	want := drainTime(lease)
	if s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) < want {
		add("stop_grace_period under %s: SIGKILL would come before the daemon's drain ends (the stop's bound and its last commit of events, half of --lease %s)", want, lease)
	}
	if !s.ReadOnly {
		add("read_only is not set: the daemon writes only its home and /tmp")
	}
	if !slices.Contains(s.CapDrop, "ALL") {
		add("cap_drop does not hold ALL")
	}
	if s.User == "root" || s.User == "0" || strings.HasPrefix(s.User, "0:") {
		add("user %s: the image's user is not root, keep it", s.User)
	}
	return problems
}

// fileFlags are the daemon's flags that name a file.
var fileFlags = []string{"tls-cert", "tls-key", "cluster-ca", "cluster-cert", "cluster-key", "secrets-key-file", "token-file", "mcp-config"}

// drainTime is the longest a daemon takes to stop on SIGTERM: its stop is
// bounded at 5s (listeners, running turns, releasing its leases) and its
// last commit of events has half the lease; 5s more of room.
func drainTime(lease time.Duration) time.Duration {
	secs := int64(math.Ceil(lease.Seconds()))
	return time.Duration(10+(secs+1)/2) * time.Second
}

// secretTargets maps where a service's secrets are mounted to their local
// files.
func (p *composeProject) secretTargets(s types.ServiceConfig) map[string]string {
	out := map[string]string{}
	for _, sec := range s.Secrets {
		target := sec.Target
		if target == "" {
			target = sec.Source
		}
		if !filepath.IsAbs(target) {
			target = secretsDir + target
		}
		out[target] = p.files[sec.Source]
	}
	return out
}

func envValue(env types.MappingWithEquals, name string) string {
	if v := env[name]; v != nil {
		return *v
	}
	return ""
}

// verifyClusterCert checks that cert was signed by ca for host, for both
// server and client authentication, as the other daemons check it.
func verifyClusterCert(caFile, certFile, host string) error {
	if caFile == "" || certFile == "" {
		return errors.New("the CA or the certificate is not among the service's secrets")
	}
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return err
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return fmt.Errorf("%s holds no PEM certificate", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(certFile), err)
		}
	}
	return nil
}

// checkBalancer finds the service that publishes the daemons' HTTP port
// and checks that it waits for every daemon and that its HAProxy
// configuration (mounted from dir) sends both ports to every daemon.
func (p *composeProject) checkBalancer(dir string, problems []string) (string, []string) {
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	var name string
	for n, s := range p.project.Services {
		for _, port := range s.Ports {
			if port.Target == 8420 {
				name = n
			}
		}
	}
	if name == "" {
		return "", append(problems, "no service publishes port 8420: a load balancer fronts the daemons")
	}
	s := p.project.Services[name]
	if slices.Contains(p.daemons, name) {
		return name, append(problems, fmt.Sprintf("daemon %s publishes 8420 itself: clients reach the daemons through a load balancer", name))
	}
	var cfg string
	for _, v := range s.Volumes {
		if strings.HasSuffix(v.Target, "/haproxy.cfg") {
			cfg = v.Source
		}
	}
	if cfg == "" {
		return name, append(problems, fmt.Sprintf("service %s: no haproxy.cfg mounted", name))
	}
	if !filepath.IsAbs(cfg) {
		cfg = filepath.Join(dir, cfg)
	}
	servers, err := haproxyServers(cfg)
	if err != nil {
		return name, append(problems, err.Error())
	}
	for _, d := range p.daemons {
		if _, ok := s.DependsOn[d]; !ok {
			add("service %s: does not depend on daemon %s", name, d)
		}
		for _, port := range []string{"8420", "8421"} {
			if !slices.Contains(servers, net.JoinHostPort(d, port)) {
				add("%s: no server %s:%s (every daemon, both ports)", filepath.Base(cfg), d, port)
			}
		}
	}
	return name, problems
}

// haproxyServers returns the addresses of the server lines of an HAProxy
// configuration.
func haproxyServers(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 3 && fields[0] == "server" {
			out = append(out, fields[2])
		}
	}
	return out, sc.Err()
}
