package llm

import "io"

// ChunkQueue holds the chunks a provider's stream decoded and has not
// returned yet, and how the stream ended. A stream embeds it and
// implements Next with Pop.
type ChunkQueue struct {
	pending []Chunk
	err     error
	done    bool
}

// Push queues c.
func (q *ChunkQueue) Push(c Chunk) { q.pending = append(q.pending, c) }

// End marks the end of the stream: once the queued chunks are returned,
// Pop returns io.EOF.
func (q *ChunkQueue) End() { q.done = true }

// Fail sets the error Pop returns once the queued chunks are returned; nil
// changes nothing.
func (q *ChunkQueue) Fail(err error) {
	if err != nil {
		q.err = err
	}
}

// Pop returns the next queued chunk. While there is none and the stream
// has neither failed nor ended, it calls fill, which reads more of the
// stream and calls Push, End or Fail.
func (q *ChunkQueue) Pop(fill func()) (Chunk, error) {
	for len(q.pending) == 0 {
		if q.err != nil {
			return Chunk{}, q.err
		}
		if q.done {
			return Chunk{}, io.EOF
		}
		fill()
	}
	c := q.pending[0]
	q.pending = q.pending[1:]
	return c, nil
}
