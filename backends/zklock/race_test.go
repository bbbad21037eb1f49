//go:build race

package zklock_test

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = true
