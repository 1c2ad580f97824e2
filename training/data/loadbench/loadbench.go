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
	for b.Loop() {
		batch, err := l.Next()
		if err != nil {
			b.Fatal(err)
		}
		n += len(batch.Indices)
	}
	rate := float64(n) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "samples/s")
	b.ReportMetric(rate/float64(cfg.Workers), "samples/s/worker")
	b.ReportMetric(float64(l.Stats().Wait.Microseconds())/float64(max(1, l.Stats().Batches)), "µs-wait/batch")
}
