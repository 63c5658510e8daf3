// Command ociimage writes Trellis's container image without a container
// engine or a registry: one layer on an empty base with a static trellis
// binary (the daemon runs as `trellis daemon`, the health check as
// `trellis status`), a non-root user, /data as the home and a CA bundle for
// the model providers' HTTPS. It writes an OCI image layout (a directory)
// and, with -archive, the same as a tar that `podman load` and
// `docker load` take. The same inputs give the same bytes: every time in
// the image is -time.
//
//	CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o trellis ./cmd/trellis
//	cd tools && go run ./ociimage -binary ../trellis -out ../dist/image -archive ../dist/trellis-image.tar
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// The image's user: not root, a fixed id so that a volume's owner is known.
const (
	uid  = 65532
	home = "/data"
)

func main() {
	binary := flag.String("binary", "", "the static trellis binary (CGO_ENABLED=0)")
	ca := flag.String("ca", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle the image trusts for HTTPS")
	out := flag.String("out", "", "directory of the OCI image layout to write (must not exist)")
	archive := flag.String("archive", "", "also write the layout as a tar file (podman load / docker load)")
	version := flag.String("version", "dev", "the image's version (its tag and label)")
	stamp := flag.Int64("time", 946684800, "Unix time of every file and of the image (default 2000-01-01)")
	check := flag.String("check", "", "instead: check the image layout in this directory (digests, sizes, config) and write its trellis binary to -binary")
	flag.Parse()
	var err error
	if *check != "" {
		err = checkLayout(*check, *binary)
	} else {
		err = run(*binary, *ca, *out, *archive, *version, time.Unix(*stamp, 0).UTC())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(binary, ca, out, archive, version string, at time.Time) error {
	if binary == "" || out == "" {
		return errors.New("-binary and -out are required")
	}
	if err := static(binary); err != nil {
		return err
	}
	if _, err := os.Stat(out); err == nil {
		return fmt.Errorf("%s exists: the layout is written to a new directory", out)
	}
	layer, err := rootLayer(binary, ca, at)
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Created = v1.Time{Time: at}
	cfg.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", uid, uid),
		Env:        []string{"PATH=/usr/local/bin", "TRELLIS_HOME=" + home, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		Entrypoint: []string{"/usr/local/bin/trellis", "daemon"},
		// Serving beyond the container's loopback needs TLS: the cert and
		// key come as secrets (docs/deploy.md).
		Cmd: []string{"--home", home, "--host", "0.0.0.0", "--port", "8420", "--grpc-port", "8421",
			"--tls-cert", "/run/secrets/tls.crt", "--tls-key", "/run/secrets/tls.key", "--log-stderr"},
		WorkingDir:   home,
		ExposedPorts: map[string]struct{}{"8420/tcp": {}, "8421/tcp": {}},
		Volumes:      map[string]struct{}{home: {}},
		Healthcheck: &v1.HealthConfig{Test: []string{"CMD", "/usr/local/bin/trellis", "--home", home, "status"},
			Interval: 10 * time.Second, Timeout: 5 * time.Second, StartPeriod: 10 * time.Second, Retries: 3},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "trellis",
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
		StopSignal: "SIGTERM",
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": "trellis:" + version,
	})); err != nil {
		return err
	}
	// docker load before Docker 25 reads only docker save's manifest.json
	// (later engines and podman read the OCI index): the layout carries
	// both, naming the same blobs.
	if err := dockerManifest(out, img, "trellis:"+version); err != nil {
		return err
	}
	if archive != "" {
		return tarDir(out, archive, at)
	}
	return nil
}

// dockerManifest writes dir/manifest.json, docker save's index of img
// (its config and layers, as blobs of the layout) under the tag ref.
func dockerManifest(dir string, img v1.Image, ref string) error {
	cfg, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	entry := struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{Config: "blobs/sha256/" + cfg.Hex, RepoTags: []string{ref}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		entry.Layers = append(entry.Layers, "blobs/sha256/"+d.Hex)
	}
	data, err := json.Marshal([]any{entry})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "manifest.json"), data, 0o644)
}

// static refuses a binary that needs a dynamic loader: the image has none.
func static(binary string) error {
	f, err := elf.Open(binary)
	if err != nil {
		return fmt.Errorf("%s: %w", binary, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is linked dynamically; build it with CGO_ENABLED=0", binary)
		}
	}
	return nil
}

// entry is one file of the layer.
type entry struct {
	name string
	mode int64
	uid  int
	dir  bool
	data []byte
}

// rootLayer is the image's one layer: the binary, the user, the home and
// the CA bundle, every file dated at.
func rootLayer(binary, ca string, at time.Time) (v1.Layer, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	certs, err := os.ReadFile(ca)
	if err != nil {
		return nil, fmt.Errorf("the CA bundle: %w", err)
	}
	entries := []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, data: fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\ntrellis:x:%d:%d:trellis:%s:/sbin/nologin\n", uid, uid, home)},
		{name: "etc/group", mode: 0o644, data: fmt.Appendf(nil, "root:x:0:\ntrellis:x:%d:\n", uid)},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: certs},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/bin/", mode: 0o755, dir: true},
		{name: "usr/local/bin/trellis", mode: 0o755, data: bin},
		{name: "data/", mode: 0o700, uid: uid, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: at, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		if e.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// tarDir writes the layout directory dir as the tar file out, in name
// order, every entry dated at.
func tarDir(dir, out string, at time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		names = append(names, path)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, path := range names {
		fi, err := os.Stat(path)
		if err != nil {
			return errors.Join(err, f.Close())
		}
		rel, _ := filepath.Rel(dir, path)
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: at, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: fi.Size()}
		if fi.IsDir() {
			h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return errors.Join(err, f.Close())
		}
		if !fi.IsDir() {
			data, err := os.ReadFile(path)
			if err != nil {
				return errors.Join(err, f.Close())
			}
			if _, err := tw.Write(data); err != nil {
				return errors.Join(err, f.Close())
			}
		}
	}
	return errors.Join(tw.Close(), f.Close())
}

// checkLayout reads the layout's one image back, validates it (every blob's
// digest and size, the config against the layers) and its configuration
// (non-root, the daemon as entrypoint), and writes the image's trellis
// binary to binary, for the caller to run.
func checkLayout(dir, binary string) error {
	if binary == "" {
		return errors.New("-check needs -binary, where to write the image's trellis")
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return err
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if len(m.Manifests) != 1 {
		return fmt.Errorf("%s holds %d images, want 1", dir, len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		return err
	}
	if err := validate.Image(img); err != nil {
		return fmt.Errorf("the image does not validate: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	if want := fmt.Sprintf("%d:%d", uid, uid); cfg.Config.User != want {
		return fmt.Errorf("the image runs as %q, want %s", cfg.Config.User, want)
	}
	if len(cfg.Config.Entrypoint) == 0 || cfg.Config.Entrypoint[0] != "/usr/local/bin/trellis" {
		return fmt.Errorf("the image's entrypoint is %v", cfg.Config.Entrypoint)
	}
	fsys := mutate.Extract(img)
	defer fsys.Close()
	tr := tar.NewReader(fsys)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return errors.New("the image has no usr/local/bin/trellis")
		}
		if err != nil {
			return err
		}
		if h.Name != "usr/local/bin/trellis" {
			continue
		}
		f, err := os.OpenFile(binary, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, tr); err != nil {
			return errors.Join(err, f.Close())
		}
		fmt.Printf("%s: %s, %d layer(s), user %s; its trellis written to %s\n", dir, m.Manifests[0].Digest, len(cfg.RootFS.DiffIDs), cfg.Config.User, binary)
		return f.Close()
	}
}
