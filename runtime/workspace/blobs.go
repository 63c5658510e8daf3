package workspace

import (
	"bytes"

	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/klauspost/compress/gzip"
)

// ChunkSize is the most compressed bytes one stored chunk holds: a blob
// is written and read a chunk at a time, never whole in memory.
const ChunkSize = 1 << 20

// Blobs is the content store of one session: blobs are addressed by the
// SHA-256 of their content and kept gzip-compressed, in chunks.
type Blobs interface {
	// Missing returns those of hashes the store does not hold.
	Missing(ctx context.Context, hashes []string) ([]string, error)
	// Put stores the sources in one transaction, each from the chunks its
	// Next returns until io.EOF; any other error from a Next abandons them
	// all, nothing kept. A blob already held is left as it is.
	Put(ctx context.Context, sources []Source) error
	// Read hands the blob's chunks to fn in order; an unknown hash is an
	// error.
	Read(ctx context.Context, hash string, fn func(chunk []byte) error) error
}

// Source is one blob to store: Size uncompressed bytes whose SHA-256 is
// Hash, as the compressed chunks Next returns. A chunk is only read until
// the next call of Next, which reuses its memory.
type Source struct {
	Hash string
	Size int64
	Next func() ([]byte, error)
}

// Save stores m: the contents of missing (the entries of m that Missing
// returned), those the snapshot kept as they were hashed and the others
// read from root, and m itself as a blob, all in one Put. It returns the
// hash of m's blob. A file read again whose content no longer has its
// recorded hash fails with ErrChanged, and nothing is stored.
func Save(ctx context.Context, blobs Blobs, root string, m Manifest, missing []Entry) (string, error) {
	raw, err := m.Marshal()
	if err != nil {
		return "", fmt.Errorf("workspace: encode the manifest: %w", err)
	}
	manifest := bytesSource(raw)
	sources := make([]Source, 0, len(missing)+1)
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, e := range missing {
		if content, ok := m.kept[e.SHA256]; ok {
			sources = append(sources, Source{Hash: e.SHA256, Size: e.Size, Next: newCompressor(bytes.NewReader(content), "", e.Size).next})
			continue
		}
		f, err := os.Open(filepath.Join(root, filepath.FromSlash(e.Path)))
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("workspace: store %s: it is gone: %w", e.Path, ErrChanged)
		}
		if err != nil {
			return "", fmt.Errorf("workspace: store %s: %w", e.Path, err)
		}
		files = append(files, f)
		sources = append(sources, Source{Hash: e.SHA256, Size: e.Size, Next: newCompressor(f, e.SHA256, e.Size).next})
	}
	sources = append(sources, manifest)
	if err := blobs.Put(ctx, sources); err != nil {
		return "", fmt.Errorf("workspace: store the checkpoint's contents: %w", err)
	}
	return manifest.Hash, nil
}

// Missing returns one entry of m for each file content blobs does not
// hold. stored, when set, is a manifest whose contents blobs holds (the
// latest stored one): only the contents it does not name are asked about.
func Missing(ctx context.Context, blobs Blobs, m Manifest, stored *Manifest) ([]Entry, error) {
	ask := m.Hashes()
	if stored != nil {
		known := map[string]bool{}
		for _, e := range stored.Entries {
			if e.Kind == KindFile {
				known[e.SHA256] = true
			}
		}
		ask = slices.DeleteFunc(ask, func(h string) bool { return known[h] })
	}
	if len(ask) == 0 {
		return nil, nil
	}
	missing, err := blobs.Missing(ctx, ask)
	if err != nil {
		return nil, fmt.Errorf("workspace: find the stored contents: %w", err)
	}
	need := map[string]bool{}
	for _, h := range missing {
		need[h] = true
	}
	var out []Entry
	for _, e := range m.Entries {
		if e.Kind == KindFile && need[e.SHA256] {
			need[e.SHA256] = false
			out = append(out, e)
		}
	}
	return out, nil
}

func bytesSource(b []byte) Source {
	sum := sha256.Sum256(b)
	hash := hex.EncodeToString(sum[:])
	return Source{Hash: hash, Size: int64(len(b)), Next: newCompressor(bytes.NewReader(b), "", int64(len(b))).next}
}

// compressor cuts the gzip stream of r into chunks of at most ChunkSize,
// checking at the end that r's content has the hash want (unless want is
// empty: content already hashed).
type compressor struct {
	r    io.Reader
	want string
	size int64 // the content's size; read counts what came
	read int64
	h    hash.Hash
	buf  *bytes.Buffer // from outputs; given back with the last chunk
	zw   *gzip.Writer
	pool *sync.Pool // zw's
	in   *[]byte
	eof  bool
}

// inputs are compressors' read buffers, outputs the buffers their chunks
// are cut from: a checkpoint's blobs reuse them instead of allocating
// (and the system zeroing) a chunk's worth of new memory for each.
var (
	inputs  = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}
	outputs = sync.Pool{New: func() any { return new(bytes.Buffer) }}
)

// writers are gzip writers at the fastest level and at none, for content
// that compresses and content that does not (compressible).
var writers = [2]sync.Pool{
	{New: func() any { w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed); return w }},     // a valid level
	{New: func() any { w, _ := gzip.NewWriterLevel(nil, gzip.NoCompression); return w }}, // a valid level
}

// newCompressor compresses r, whose size should be size: it reads at most
// one byte more, so that a file that grows while it is read ends in
// ErrChanged instead of being read for as long as it grows.
func newCompressor(r io.Reader, want string, size int64) *compressor {
	c := &compressor{r: io.LimitReader(r, size+1), want: want, size: size, in: inputs.Get().(*[]byte), buf: outputs.Get().(*bytes.Buffer)}
	c.buf.Reset()
	c.buf.Grow(int(min(size, ChunkSize)) + 1<<10) // stored blocks add 5 bytes in 64 KiB
	if want != "" {
		c.h = sha256.New()
	}
	return c
}

// start sets c's writer by the first bytes of the content.
func (c *compressor) start(first []byte) {
	c.pool = &writers[0]
	if !compressible(first) {
		c.pool = &writers[1]
	}
	c.zw = c.pool.Get().(*gzip.Writer)
	c.zw.Reset(c.buf)
}

func (c *compressor) next() ([]byte, error) {
	for !c.eof && c.buf.Len() < ChunkSize {
		n, err := c.r.Read(*c.in)
		if c.read += int64(n); c.read > c.size {
			return nil, ErrChanged
		}
		if n > 0 {
			if c.zw == nil {
				c.start((*c.in)[:n])
			}
			if c.h != nil {
				c.h.Write((*c.in)[:n])
			}
			if _, werr := c.zw.Write((*c.in)[:n]); werr != nil {
				return nil, werr
			}
		}
		if errors.Is(err, io.EOF) {
			if err := c.finish(); err != nil {
				return nil, err
			}
		} else if err != nil {
			return nil, err
		}
	}
	if c.buf == nil {
		return nil, io.EOF
	}
	if c.buf.Len() == 0 {
		outputs.Put(c.buf)
		c.buf = nil
		return nil, io.EOF
	}
	return c.buf.Next(min(c.buf.Len(), ChunkSize)), nil
}

// finish ends the gzip stream, gives back the buffers and checks the hash.
func (c *compressor) finish() error {
	c.eof = true
	if c.zw == nil {
		c.start(nil)
	}
	if err := c.zw.Close(); err != nil {
		return err
	}
	c.zw.Reset(nil)
	c.pool.Put(c.zw)
	inputs.Put(c.in)
	c.zw, c.in = nil, nil
	if c.read != c.size || c.h != nil && hex.EncodeToString(c.h.Sum(nil)) != c.want {
		return ErrChanged
	}
	return nil
}

// compressible says whether gzip would shrink content beginning with
// sample, by the entropy of the sample's bytes: above 7.5 bits a byte
// (random bytes, or what is already compressed: archives, images, video)
// it would save little or nothing, yet at its fastest level it spends
// as long on them as on text. Such content is stored in gzip's
// uncompressed blocks: the same format, read the same way.
func compressible(sample []byte) bool {
	sample = sample[:min(len(sample), 64<<10)]
	if len(sample) < 4<<10 { // too few bytes to tell; and cheap either way
		return true
	}
	var counts [256]int
	for _, b := range sample {
		counts[b]++
	}
	n := float64(len(sample))
	bits := 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			bits -= p * math.Log2(p)
		}
	}
	return bits < 7.5
}

// Open returns a reader of blob hash's uncompressed content. The whole
// blob is read from the store before the first byte is returned only when
// the store's Read does so; chunks are decompressed as they come.
func Open(ctx context.Context, blobs Blobs, hash string) (io.ReadCloser, error) {
	pr, pw := io.Pipe()
	go func() {
		err := blobs.Read(ctx, hash, func(chunk []byte) error {
			_, err := pw.Write(chunk)
			return err
		})
		pw.CloseWithError(err)
	}()
	zr, err := gzip.NewReader(pr)
	if err != nil {
		pr.CloseWithError(err)
		return nil, fmt.Errorf("workspace: read blob %s: %w", hash, err)
	}
	return readCloser{Reader: zr, close: func() error { return pr.Close() }}, nil
}

// ReadAll returns blob hash's content, checked against its hash.
func ReadAll(ctx context.Context, blobs Blobs, hash string) ([]byte, error) {
	rc, err := Open(ctx, blobs, hash)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("workspace: read blob %s: %w", hash, err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hash {
		return nil, fmt.Errorf("workspace: blob %s does not have its hash", hash)
	}
	return b, nil
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }
