//go:build !race

package e2e

// raceDetector is whether the race detector is built in (race_on_test.go).
const raceDetector = false
