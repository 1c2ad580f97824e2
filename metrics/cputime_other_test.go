//go:build !unix

package metrics

// cpuSeconds reports that process CPU time is not available here.
func cpuSeconds() float64 { return -1 }
