package workspace

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ChunkSize is the most compressed bytes one stored chunk holds: a blob
// is written and read a chunk at a time, never whole in memory.
const ChunkSize = 1 << 20

// Blobs is the content store of one session: blobs are addressed by the
// SHA-256 of their content and kept gzip-compressed, in chunks.
type Blobs interface {
	// Missing returns those of hashes the store does not hold.
	Missing(ctx context.Context, hashes []string) ([]string, error)
	// Put stores the blob hash of size uncompressed bytes from the chunks
	// next returns until io.EOF; any other error from next abandons the
	// blob, nothing of it kept. A blob already held is left as it is.
	Put(ctx context.Context, hash string, size int64, next func() ([]byte, error)) error
	// Read hands the blob's chunks to fn in order; an unknown hash is an
	// error.
	Read(ctx context.Context, hash string, fn func(chunk []byte) error) error
}

// Save stores the contents of m's files, read from root, that blobs does
// not hold yet; each is stored once however many paths hold it. It
// returns how many uncompressed bytes it stored. A file whose content no
// longer has its recorded hash fails with ErrChanged.
func Save(ctx context.Context, blobs Blobs, root string, m Manifest) (int64, error) {
	missing, err := Missing(ctx, blobs, m)
	if err != nil {
		return 0, err
	}
	var stored int64
	for _, e := range missing {
		if err := putFile(ctx, blobs, filepath.Join(root, filepath.FromSlash(e.Path)), e); err != nil {
			return stored, err
		}
		stored += e.Size
	}
	return stored, nil
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

func putFile(ctx context.Context, blobs Blobs, p string, e Entry) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("workspace: store %s: %w", e.Path, err)
	}
	defer f.Close()
	c := newCompressor(f, e.SHA256)
	if err := blobs.Put(ctx, e.SHA256, e.Size, c.next); err != nil {
		if errors.Is(err, ErrChanged) {
			return fmt.Errorf("workspace: store %s: %w", e.Path, ErrChanged)
		}
		return fmt.Errorf("workspace: store %s: %w", e.Path, err)
	}
	return nil
}

// PutBytes stores b as a blob and returns its hash (a manifest is stored
// so).
func PutBytes(ctx context.Context, blobs Blobs, b []byte) (string, error) {
	sum := sha256.Sum256(b)
	hash := hex.EncodeToString(sum[:])
	if err := blobs.Put(ctx, hash, int64(len(b)), newCompressor(bytes.NewReader(b), hash).next); err != nil {
		return "", fmt.Errorf("workspace: store a blob: %w", err)
	}
	return hash, nil
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
	c.zw = gzip.NewWriter(&c.buf)
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
