// Package loadbench measures data pipelines through the loader for the
// pipelines' benchmarks, outside package data so that trainers do not link
// package testing.
package loadbench

import (
	"testing"

	"github.com/ortrain/ortrain/training/data"
)

// Run runs ds through a loader with cfg for b's iterations, one batch
// each, and reports samples/s in total and per worker: the figure to set
// against what the accelerator consumes. Pipelines' benchmarks share it.
//
// It also reports samples per CPU-second of the whole process (workers,
// loader, GC): on a machine shared with other work, wall-clock rates
// measure the CPUs this process was given, while samples/cpu-s measures
// the pipeline, and cpus (CPU-seconds per second) shows how many cores it
// actually had.
func Run(b *testing.B, ds data.Dataset, cfg data.Config) {
	b.Helper()
	l, err := data.New(ds, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Next(); err != nil { // start the workers, fill the caches
		b.Fatal(err)
	}
	n := 0
	cpu0 := CPUSeconds()
	for b.Loop() {
		batch, err := l.Next()
		if err != nil {
			b.Fatal(err)
		}
		n += len(batch.Indices)
	}
	if cpu := CPUSeconds() - cpu0; cpu0 >= 0 && cpu > 0 {
		b.ReportMetric(float64(n)/cpu, "samples/cpu-s")
		b.ReportMetric(cpu/b.Elapsed().Seconds(), "cpus")
	}
	rate := float64(n) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "samples/s")
	b.ReportMetric(rate/float64(cfg.Workers), "samples/s/worker")
	b.ReportMetric(float64(l.Stats().Wait.Microseconds())/float64(max(1, l.Stats().Batches)), "µs-wait/batch")
}
