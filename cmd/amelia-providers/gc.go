package main

import (
	"os"
	"runtime/debug"
)

// streamGCPercent is the garbage collector's target in this process
// (Go's default is 100), unless GOGC says otherwise. Providers stream
// bulk bytes (a file copy, an archive) through libraries that allocate
// per packet: x/crypto/ssh allocates each 32 KiB packet it reads, so a
// 1 GiB copy out over ssh makes about 1 GiB of garbage against a live
// heap of a few MB, and at 100 the collector ran every few MB, a third
// of the plugin's CPU. At 400 it runs a quarter as often, for a heap
// that peaks at five times the live one instead of twice; measured on
// 1 GiB of stdout over x/crypto/ssh (load 10-15, 2 cores): 2.97-3.82
// CPU-s at 100, 2.24-2.60 at 400 (docs/performance.md#files).
const streamGCPercent = 400

// gcPercent is the target to set given GOGC's value, or false to leave
// the runtime's own (GOGC set: the user chose).
func gcPercent(gogc string, set bool) (int, bool) {
	if set && gogc != "" {
		return 0, false
	}
	return streamGCPercent, true
}

// tuneGC sets the collector's target for a process that streams.
func tuneGC() {
	gogc, set := os.LookupEnv("GOGC")
	if pct, ok := gcPercent(gogc, set); ok {
		debug.SetGCPercent(pct)
	}
}
