//go:build race

package e2e

// raceDetector is whether the race detector is built in. It slows every
// goroutine several times over, so a test whose point is a load the daemon
// cannot keep up with may not reach that load under it.
const raceDetector = true
