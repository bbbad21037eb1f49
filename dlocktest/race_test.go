//go:build race

package dlocktest

const raceEnabled = true
