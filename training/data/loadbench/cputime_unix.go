//go:build unix

package loadbench

import "syscall"

// CPUSeconds returns the user plus system CPU time of the process, or -1 if
// it cannot be read.
func CPUSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
