// Package fuzzguard holds what every fuzz target of ortrain checks besides
// its parser's own promises: that an input finishes, and how much it makes
// the parser allocate.
package fuzzguard

import (
	"fmt"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Watchdog turns an input still running after d into a crash showing
// every goroutine, which the fuzzer records as a failing input (it has no
// timeout of its own: a hang just stalls it). Call the result to disarm.
func Watchdog(d time.Duration) (stop func() bool) {
	return time.AfterFunc(d, func() {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("fuzz input still running after %v", d))
	}).Stop
}

// Allocated is the number of bytes allocated on the heap so far; unlike
// runtime.ReadMemStats it does not stop the world.
func Allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
