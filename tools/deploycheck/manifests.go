package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	kyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// manifests are the objects of rendered manifests, decoded.
type manifests struct {
	objects  []runtime.Object
	set      *appsv1.StatefulSet
	pdb      *policyv1.PodDisruptionBudget
	services []*corev1.Service
}

// strict decodes YAML into the types of client-go's scheme, refusing
// unknown and duplicate fields.
var strict = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	kjson.SerializerOptions{Yaml: true, Strict: true})

// checkManifests decodes every object of b (YAML documents) strictly and
// checks the daemons' StatefulSet and what goes with it.
func checkManifests(b []byte) (*manifests, error) {
	m := &manifests{}
	r := kyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := strict.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i, firstComment(doc), err)
		}
		m.objects = append(m.objects, obj)
		switch o := obj.(type) {
		case *appsv1.StatefulSet:
			if m.set != nil {
				return nil, fmt.Errorf("document %d: a second StatefulSet %s", i, o.Name)
			}
			m.set = o
		case *policyv1.PodDisruptionBudget:
			m.pdb = o
		case *corev1.Service:
			m.services = append(m.services, o)
		case *appsv1.Deployment:
			return nil, fmt.Errorf("document %d: Deployment %s: the daemons run as a StatefulSet (a home and a name each)", i, o.Name)
		}
	}
	if problems := m.check(); len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "\n  "))
	}
	return m, nil
}

func (m *manifests) summary() string {
	return fmt.Sprintf("%d objects, StatefulSet %s (%d replicas, grace %ds), PodDisruptionBudget %s, %d Services: ok",
		len(m.objects), m.set.Name, *m.set.Spec.Replicas, *m.set.Spec.Template.Spec.TerminationGracePeriodSeconds, m.pdb.Name, len(m.services))
}

func (m *manifests) check() []string {
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	if m.set == nil {
		return []string{"no StatefulSet: the daemons run as one"}
	}
	set := m.set
	pod := set.Spec.Template
	podLabels := labels.Set(pod.Labels)
	sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil || !sel.Matches(podLabels) {
		add("StatefulSet %s: its selector does not select its own pods", set.Name)
	}

	if len(pod.Spec.Containers) != 1 {
		add("StatefulSet %s: %d containers, want the daemon alone", set.Name, len(pod.Spec.Containers))
		return problems
	}
	c := pod.Spec.Containers[0]
	args := c.Args
	psc := pod.Spec.SecurityContext
	csc := c.SecurityContext
	nonRoot := (psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot) || (csc != nil && csc.RunAsNonRoot != nil && *csc.RunAsNonRoot)
	if !nonRoot {
		add("container %s: runAsNonRoot is not set", c.Name)
	}
	if (psc != nil && psc.RunAsUser != nil && *psc.RunAsUser == 0) || (csc != nil && csc.RunAsUser != nil && *csc.RunAsUser == 0) {
		add("container %s: runAsUser 0", c.Name)
	}
	if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
		add("container %s: readOnlyRootFilesystem is not set", c.Name)
	}
	if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		add("container %s: allowPrivilegeEscalation is not false", c.Name)
	}
	if csc == nil || csc.Capabilities == nil || !containsCap(csc.Capabilities.Drop, "ALL") || len(csc.Capabilities.Add) > 0 {
		add("container %s: capabilities do not drop ALL (and add none)", c.Name)
	}

	httpPort := int32(8420)
	if v, ok := flagValue(args, "port"); ok {
		_, _ = fmt.Sscan(v, &httpPort)
	}
	scheme := corev1.URISchemeHTTP
	if _, ok := flagValue(args, "tls-cert"); ok {
		scheme = corev1.URISchemeHTTPS
	}
	// Readiness asks /ready (503 while the store does not answer),
	// liveness /health (the process serves): a store outage must take a
	// pod out of the Services, not restart it.
	for _, p := range []struct {
		name, path string
		probe      *corev1.Probe
	}{{"readinessProbe", "/ready", c.ReadinessProbe}, {"livenessProbe", "/health", c.LivenessProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			add("container %s: no %s on GET %s", c.Name, p.name, p.path)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path {
			add("container %s: %s asks %s, the daemon's endpoint for it is %s", c.Name, p.name, g.Path, p.path)
		}
		if port := resolvePort(c, g.Port); port != httpPort {
			add("container %s: %s on port %s (%d), the daemon serves %s on --port %d", c.Name, p.name, g.Port.String(), port, p.path, httpPort)
		}
		if g.Scheme != scheme {
			add("container %s: %s scheme %s, the daemon serves %s", c.Name, p.name, g.Scheme, scheme)
		}
	}

	if _, ok := flagValue(args, "advertise"); !ok {
		add("container %s: no --advertise: a pod's bound address is not one the other daemons can reach", c.Name)
	}
	_, tlsOn := flagValue(args, "tls-cert")
	_, insecure := flagValue(args, "insecure-no-tls")
	if !tlsOn && !insecure {
		add("container %s: neither --tls-cert nor --insecure-no-tls: the daemon refuses a non-loopback host without one", c.Name)
	}
	if tlsOn {
		for _, f := range []string{"cluster-ca", "cluster-cert", "cluster-key"} {
			if _, ok := flagValue(args, f); !ok {
				add("container %s: --tls-cert without --%s: daemons serving TLS forward only over mutual TLS", c.Name, f)
			}
		}
	}
	if _, ok := flagValue(args, "token-file"); ok {
		add("container %s: --token-file: the daemon restricts its token file's mode at start, which a Secret's read-only volume refuses", c.Name)
	}
	mounted := mountedFiles(pod.Spec, c)
	for _, f := range fileFlags {
		if v, ok := flagValue(args, f); ok {
			if _, ok := mounted[v]; !ok {
				add("container %s: --%s %s: no volume gives that file", c.Name, f, v)
			}
		}
	}
	home, _ := flagValue(args, "home")
	if !claimMounted(set, c, home) {
		add("container %s: its home %s is not on a volumeClaimTemplate: a daemon's id, logs and outputs must survive the pod", c.Name, home)
	}
	lease := 10 * time.Second
	if v, ok := flagValue(args, "lease"); ok {
		if lease, err = time.ParseDuration(v); err != nil {
			add("container %s: --lease %q: %v", c.Name, v, err)
		}
	}
	want := drainTime(lease)
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < want {
		add("StatefulSet %s: terminationGracePeriodSeconds under %s: SIGKILL would come before the daemon's drain ends (half of --lease %s in it)", set.Name, want, lease)
	}

	switch {
	case m.pdb == nil:
		add("no PodDisruptionBudget")
	default:
		sel, err := metav1.LabelSelectorAsSelector(m.pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(podLabels) {
			add("PodDisruptionBudget %s: its selector does not select the daemons' pods", m.pdb.Name)
		}
		if m.pdb.Spec.MaxUnavailable == nil && m.pdb.Spec.MinAvailable == nil {
			add("PodDisruptionBudget %s: neither maxUnavailable nor minAvailable", m.pdb.Name)
		}
	}
	var headless bool
	for _, s := range m.services {
		if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
			add("Service %s: its selector does not select the daemons' pods", s.Name)
		}
		if s.Name == set.Spec.ServiceName {
			headless = s.Spec.ClusterIP == corev1.ClusterIPNone
		}
	}
	if !headless {
		add("StatefulSet %s: its serviceName %q is not a headless Service of the manifests (the pods' DNS names)", set.Name, set.Spec.ServiceName)
	}
	return problems
}

func containsCap(caps []corev1.Capability, want corev1.Capability) bool {
	for _, c := range caps {
		if c == want {
			return true
		}
	}
	return false
}

// resolvePort returns the number of a probe's port, named or not.
func resolvePort(c corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return -1
}

// mountedFiles returns the files the container's Secret, projected and
// ConfigMap volumes put in its file system, by path.
func mountedFiles(spec corev1.PodSpec, c corev1.Container) map[string]bool {
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	out := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		v := vols[vm.Name]
		var items []corev1.KeyToPath
		switch {
		case v.Secret != nil:
			items = v.Secret.Items
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.Secret != nil {
					items = append(items, s.Secret.Items...)
				}
				if s.ConfigMap != nil {
					items = append(items, s.ConfigMap.Items...)
				}
			}
		case v.ConfigMap != nil:
			items = v.ConfigMap.Items
		}
		for _, it := range items {
			out[path.Join(vm.MountPath, it.Path)] = true
		}
	}
	return out
}

// claimMounted reports whether dir is the mount of one of the set's
// volumeClaimTemplates.
func claimMounted(set *appsv1.StatefulSet, c corev1.Container, dir string) bool {
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != dir {
			continue
		}
		for _, t := range set.Spec.VolumeClaimTemplates {
			if t.Name == vm.Name {
				return true
			}
		}
	}
	return false
}

// configCheck gives the daemon container's command line to trellisd's
// config check: $(VAR) references are set from the pod's field
// references, the mounted files are read from mount (standing in for the
// pod's /run/secrets), the home is a new directory.
func (m *manifests) configCheck(trellisd, mount string) error {
	home, err := os.MkdirTemp("", "deploycheck-home-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	c := m.set.Spec.Template.Spec.Containers[0]
	homeFlag, _ := flagValue(c.Args, "home")
	local := func(v string) string {
		v = strings.NewReplacer("$(POD_NAME)", m.set.Name+"-0", "$(POD_NAMESPACE)", "default").Replace(v)
		if rest, ok := strings.CutPrefix(v, secretsDir); ok {
			return path.Join(mount, rest)
		}
		if v == homeFlag {
			return home
		}
		return v
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "TRELLIS_") {
			// A value from a Secret is not known here: a DSN of the right
			// form stands in.
			env[e.Name] = e.Value
			if e.ValueFrom != nil && e.Name == "TRELLIS_STORE" {
				env[e.Name] = "postgres://trellis@postgres:5432/trellis"
			}
		}
	}
	return runConfigCheck(trellisd, "StatefulSet "+m.set.Name, c.Args, env, local)
}

// stripComments drops the comment lines of a YAML document.
func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out.Write(line)
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}

// firstComment is helm's "# Source: FILE" line of a document, naming the
// template it came from.
func firstComment(doc []byte) string {
	for _, line := range strings.Split(string(doc), "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(line), "# Source: "); ok {
			return s
		}
	}
	return "no source line"
}
