//go:build race

package worker_test

const raceEnabled = true
