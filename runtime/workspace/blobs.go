package workspace

import (
	"bytes"

	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

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
// Hash, as the compressed chunks Next returns.
type Source struct {
	Hash string
	Size int64
	Next func() ([]byte, error)
}

// Save stores m: the contents of missing (the entries of m that Missing
// returned), read from root, and m itself as a blob, all in one Put. It
// returns the hash of m's blob. A file whose content no longer has its
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
		f, err := os.Open(filepath.Join(root, filepath.FromSlash(e.Path)))
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("workspace: store %s: it is gone: %w", e.Path, ErrChanged)
		}
		if err != nil {
			return "", fmt.Errorf("workspace: store %s: %w", e.Path, err)
		}
		files = append(files, f)
		sources = append(sources, Source{Hash: e.SHA256, Size: e.Size, Next: newCompressor(f, e.SHA256).next})
	}
	sources = append(sources, manifest)
	if err := blobs.Put(ctx, sources); err != nil {
		return "", fmt.Errorf("workspace: store the checkpoint's contents: %w", err)
	}
	return manifest.Hash, nil
}

// Missing returns one entry of m for each file content blobs does not
// hold.
func Missing(ctx context.Context, blobs Blobs, m Manifest) ([]Entry, error) {
	missing, err := blobs.Missing(ctx, m.Hashes())
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
	return Source{Hash: hash, Size: int64(len(b)), Next: newCompressor(bytes.NewReader(b), hash).next}
}

// compressor cuts the gzip stream of r into chunks of at most ChunkSize,
// checking at the end that r's content has the hash want.
type compressor struct {
	r    io.Reader
	want string
	h    hashWriter
	buf  bytes.Buffer
	zw   *gzip.Writer
	in   []byte
	eof  bool
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
}

func newCompressor(r io.Reader, want string) *compressor {
	c := &compressor{r: r, want: want, h: sha256.New(), in: make([]byte, 256<<10)}
	// The fastest level: storing a checkpoint sits on a write tool call's
	// path, and at it the encoder keeps incompressible blocks as they are
	// instead of searching them.
	c.zw, _ = gzip.NewWriterLevel(&c.buf, gzip.BestSpeed) // a valid level
	return c
}

func (c *compressor) next() ([]byte, error) {
	for !c.eof && c.buf.Len() < ChunkSize {
		n, err := c.r.Read(c.in)
		if n > 0 {
			c.h.Write(c.in[:n])
			if _, werr := c.zw.Write(c.in[:n]); werr != nil {
				return nil, werr
			}
		}
		if errors.Is(err, io.EOF) {
			c.eof = true
			if err := c.zw.Close(); err != nil {
				return nil, err
			}
			if hex.EncodeToString(c.h.Sum(nil)) != c.want {
				return nil, ErrChanged
			}
		} else if err != nil {
			return nil, err
		}
	}
	if c.buf.Len() == 0 {
		return nil, io.EOF
	}
	chunk := make([]byte, min(c.buf.Len(), ChunkSize))
	copy(chunk, c.buf.Next(len(chunk)))
	return chunk, nil
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
