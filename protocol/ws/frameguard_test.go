package ws

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// frame builds a masked client frame header announcing n payload bytes.
func frameHeader(n uint64) []byte {
	h := []byte{0x81, 0x80}
	switch {
	case n < 126:
		h[1] |= byte(n)
	case n <= 0xffff:
		h[1] |= 126
		h = binary.BigEndian.AppendUint16(h, uint16(n))
	default:
		h[1] |= 127
		h = binary.BigEndian.AppendUint64(h, n)
	}
	return append(h, 1, 2, 3, 4) // masking key
}

func TestFrameGuard(t *testing.T) {
	var stream []byte
	for _, n := range []uint64{0, 5, 125, 126, 300, 70000} {
		stream = append(stream, frameHeader(n)...)
		stream = append(stream, bytes.Repeat([]byte{'x'}, int(n))...)
	}
	for _, chunk := range []int{1, 3, 7, 4096} {
		g := &frameGuard{r: &chunkReader{b: stream, n: chunk}, limit: 70000}
		got, err := io.ReadAll(g)
		if err != nil || !bytes.Equal(got, stream) {
			t.Errorf("chunk %d: %d bytes, %v", chunk, len(got), err)
		}
	}
	for _, n := range []uint64{70001, 1 << 62, 1<<64 - 1} {
		over := append(append([]byte{}, stream...), frameHeader(n)...)
		g := &frameGuard{r: &chunkReader{b: over, n: 5}, limit: 70000}
		_, err := io.ReadAll(g)
		var big *ErrFrameTooLarge
		if !errors.As(err, &big) || big.Length != n {
			t.Errorf("length %d: err %v", n, err)
		}
	}
}

type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[n:]
	return n, nil
}

func FuzzFrameGuard(f *testing.F) {
	f.Add(frameHeader(5), uint16(1))
	f.Add(frameHeader(1<<62), uint16(3))
	f.Add([]byte{0x81, 0xff, 0, 0, 0, 0, 0, 0, 0, 1}, uint16(2))
	f.Fuzz(func(t *testing.T, b []byte, chunk uint16) {
		g := &frameGuard{r: &chunkReader{b: b, n: int(chunk%64) + 1}, limit: 1000}
		got, err := io.ReadAll(g)
		var big *ErrFrameTooLarge
		if err != nil && !errors.As(err, &big) {
			t.Fatalf("unexpected error %v", err)
		}
		if err == nil && !bytes.Equal(got, b) {
			t.Fatal("bytes changed on the way")
		}
		if big != nil && big.Length <= 1000 {
			t.Fatalf("refused a frame of %d bytes", big.Length)
		}
	})
}
