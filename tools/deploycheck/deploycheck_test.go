package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/engine"
	"sigs.k8s.io/yaml"
)

const (
	composeFile = "../../deploy/compose/compose.yaml"
	chartDir    = "../../deploy/helm/trellis"
)

func TestComposeFileIsAccepted(t *testing.T) {
	p, err := checkCompose(composeFile, writeSecrets(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"trellis-1", "trellis-2", "trellis-3"}; !slices.Equal(p.daemons, want) || p.balancer != "haproxy" {
		t.Fatalf("daemons %v behind %q, want %v behind haproxy", p.daemons, p.balancer, want)
	}
}

// TestBrokenComposeIsRefused: each change breaks the compose file in one
// way, and the check says which.
func TestBrokenComposeIsRefused(t *testing.T) {
	orig, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, old, new, want string
		wrongHost            bool
	}{
		{name: "an unknown key (the compose schema)", old: "    hostname: trellis-2\n", new: "    hostname: trellis-2\n    restart_policy: always\n",
			want: "restart_policy"},
		{name: "no healthcheck", old: "    hostname: trellis-2\n", new: "    hostname: trellis-2\n    healthcheck: {disable: true}\n",
			want: "service trellis-2: no healthcheck"},
		{name: "a shared home", old: "      - trellis-3-data:/data\n", new: "      - trellis-1-data:/data\n",
			want: "service trellis-3: its home volume trellis-1-data is trellis-1's too"},
		{name: "a wrong advertise name", old: `--advertise, "trellis-2:8421"`, new: `--advertise, "trellis-9:8421"`,
			want: "service trellis-2: --advertise trellis-9:8421"},
		{name: "a short grace period", old: "  stop_grace_period: 15s\n", new: "  stop_grace_period: 10s\n",
			want: "stop_grace_period under 15s"},
		{name: "a file flag no secret gives", old: "--secrets-key-file, /run/secrets/secrets.key]\n    secrets:\n      - tls.crt\n      - tls.key\n      - cluster-ca.crt\n      - secrets.key\n      - pgpass\n      - {source: trellis-1.crt",
			new:  "--secrets-key-file, /run/secrets/secret.key]\n    secrets:\n      - tls.crt\n      - tls.key\n      - cluster-ca.crt\n      - secrets.key\n      - pgpass\n      - {source: trellis-1.crt",
			want: "service trellis-1: --secrets-key-file /run/secrets/secret.key: no secret of the service is mounted there"},
		{name: "a cluster certificate for another host", wrongHost: true,
			want: "service trellis-2: cluster certificate: trellis-2.crt: x509: certificate is valid for elsewhere, not trellis-2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			changed := string(orig)
			if c.old != "" {
				if !strings.Contains(changed, c.old) {
					t.Fatalf("compose.yaml no longer holds %q: update the test", c.old)
				}
				changed = strings.Replace(changed, c.old, c.new, 1)
			}
			var hosts map[string]string
			if c.wrongHost {
				hosts = map[string]string{"trellis-2": "elsewhere"}
			}
			_, err := checkCompose(copyCompose(t, changed), writeSecrets(t, hosts))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
}

func TestComposeWithoutABalancerLineIsRefused(t *testing.T) {
	orig, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	file := copyCompose(t, string(orig))
	cfg := filepath.Join(filepath.Dir(file), "haproxy.cfg")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b = []byte(strings.Replace(string(b), "  server trellis-3 trellis-3:8421 port 8420\n", "", 1))
	if err := os.WriteFile(cfg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = checkCompose(file, writeSecrets(t, nil))
	if want := "haproxy.cfg: no server trellis-3:8421"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
}

func TestComposeMissingSecretFileIsRefused(t *testing.T) {
	dir := writeSecrets(t, nil)
	if err := os.Remove(filepath.Join(dir, "secrets.key")); err != nil {
		t.Fatal(err)
	}
	_, err := checkCompose(composeFile, dir)
	if want := "secret secrets.key: its file secrets.key is missing or empty"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
}

func TestChartRendersAcceptedManifests(t *testing.T) {
	for _, values := range []string{"", filepath.Join(chartDir, "ci/tls-values.yaml")} {
		m, err := checkManifests([]byte(render(t, values, nil)))
		if err != nil {
			t.Fatalf("values %q: %v", values, err)
		}
		t.Logf("values %q: %s", values, m.summary())
	}
}

// TestBrokenManifestIsRefused: each change breaks the rendered manifests
// in one way, and the check says which.
func TestBrokenManifestIsRefused(t *testing.T) {
	good := render(t, "", nil)
	cases := []struct{ name, old, new, want string }{
		{"an unknown field", "          readinessProbe:\n", "          readinesProbe:\n", `unknown field "spec.template.spec.containers[0].readinesProbe"`},
		{"a duplicate field", "  podManagementPolicy: Parallel\n", "  podManagementPolicy: Parallel\n  podManagementPolicy: OrderedReady\n", `"podManagementPolicy" already set`},
		{"no liveness probe", "          livenessProbe:\n            httpGet:\n              path: /health\n              port: http\n              scheme: HTTP\n            periodSeconds: 10\n            timeoutSeconds: 5\n            failureThreshold: 3\n", "", "no livenessProbe on GET /health"},
		{"a probe on another path", "          readinessProbe:\n            httpGet:\n              path: /ready\n", "          readinessProbe:\n            httpGet:\n              path: /healthz\n", "readinessProbe asks /healthz"},
		{"readiness on the liveness endpoint", "          readinessProbe:\n            httpGet:\n              path: /ready\n", "          readinessProbe:\n            httpGet:\n              path: /health\n", "readinessProbe asks /health, the daemon's endpoint for it is /ready"},
		{"a root user", "        runAsNonRoot: true\n        # The image's user trellis; the home volume is made its group's.\n        runAsUser: 65532\n",
			"        runAsNonRoot: false\n        runAsUser: 0\n", "runAsNonRoot is not set"},
		{"a writable root", "            readOnlyRootFilesystem: true\n", "            readOnlyRootFilesystem: false\n", "readOnlyRootFilesystem is not set"},
		{"a budget selecting nothing", "  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: trellis\n",
			"  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: trellis-other\n", "PodDisruptionBudget trellis: its selector does not select"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(good, c.old) {
				t.Fatalf("the rendered chart no longer holds %q: update the test", c.old)
			}
			_, err := checkManifests([]byte(strings.Replace(good, c.old, c.new, 1)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
}

func TestShortGracePeriodIsRefused(t *testing.T) {
	_, err := checkManifests([]byte(render(t, "", map[string]any{"leaseSeconds": 30, "terminationGracePeriodSeconds": 20})))
	if want := "terminationGracePeriodSeconds under 25s"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
}

func TestValuesSchemaRefusesUnknownKeys(t *testing.T) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = util.ToRenderValues(ch, map[string]any{"replicas": 3}, common.ReleaseOptions{Name: "trellis"}, nil)
	if err == nil || !strings.Contains(err.Error(), "replicas") {
		t.Fatalf("got %v, want the schema to refuse replicas", err)
	}
}

// render renders the chart as helm template does, with the values of file
// (none: the defaults) and then set.
func render(t *testing.T, file string, set map[string]any) string {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &vals); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range set {
		vals[k] = v
	}
	top, err := util.ToRenderValues(ch, vals, common.ReleaseOptions{Name: "trellis", Namespace: "default", IsInstall: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(ch, top)
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range out {
			if !yield(n) {
				return
			}
		}
	}) {
		if strings.HasSuffix(name, "NOTES.txt") || strings.TrimSpace(out[name]) == "" {
			continue
		}
		docs = append(docs, "---\n# Source: "+name+"\n"+out[name])
	}
	return strings.Join(docs, "\n")
}

// copyCompose writes a compose file with the given content, and the HAProxy
// configuration beside it, into a new directory.
func copyCompose(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(filepath.Dir(composeFile), "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "haproxy.cfg"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "compose.yaml")
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// writeSecrets writes throwaway secret files as gen-secrets.sh names them
// into a new directory: the cluster certificate of a daemon is made for
// hosts[daemon] when given, else for the daemon's name.
func writeSecrets(t *testing.T, hosts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	write("secrets.key", []byte(base64.StdEncoding.EncodeToString(key)+"\n"))
	write("pg-password", []byte("throwaway\n"))
	write("pgpass", []byte("postgres:5432:trellis:trellis:throwaway\n"))

	caKey, caCert, caDER := newCert(t, "trellis cluster CA", nil, nil, nil)
	write("cluster-ca.crt", pemCert(caDER))
	k, _, der := newCert(t, "trellis", []string{"localhost"}, nil, nil)
	write("tls.crt", pemCert(der))
	write("tls.key", pemKey(t, k))
	for _, n := range []string{"trellis-1", "trellis-2", "trellis-3"} {
		host := n
		if h, ok := hosts[n]; ok {
			host = h
		}
		k, _, der := newCert(t, "trellisd "+n, []string{host}, caCert, caKey)
		write(n+".crt", pemCert(der))
		write(n+".key", pemKey(t, k))
	}
	return dir
}

// newCert makes a key and a certificate: a CA when parent is nil and names
// are none, else a leaf for names, for server and client authentication,
// signed by parent (self-signed without one).
func newCert(t *testing.T, cn string, names []string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     names,
	}
	if names == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func pemKey(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// TestConfigCheckRefusesAnUnknownFlag: with a trellisd binary (CI gives
// the one it built), each daemon's command line goes through its config
// check, which refuses a flag the daemon does not have.
func TestConfigCheckRefusesAnUnknownFlag(t *testing.T) {
	bin := os.Getenv("DEPLOYCHECK_TRELLISD")
	if bin == "" {
		t.Skip("DEPLOYCHECK_TRELLISD names no trellisd binary (.ci/run gives the one it built)")
	}
	secrets := writeSecrets(t, nil)
	p, err := checkCompose(composeFile, secrets)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.configCheck(bin); err != nil {
		t.Fatalf("the compose file's command lines: %v", err)
	}
	orig, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(orig), "--lease, 10s,", "--lease-time, 10s,", 1)
	if p, err = checkCompose(copyCompose(t, changed), secrets); err != nil {
		t.Fatal(err)
	}
	err = p.configCheck(bin)
	if want := "flag provided but not defined: -lease-time"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
}
