//go:build !unix

package loadbench

// CPUSeconds reports that process CPU time is not available here: -1.
func CPUSeconds() float64 { return -1 }
