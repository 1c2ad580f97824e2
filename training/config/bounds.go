package config

import (
	"github.com/ortrain/ortrain/training/data"
)

// Upper bounds of the counts a configuration gives. Each is far above any
// useful setting and far below where sizing a loader, a step or a thread
// pool from it would overflow, panic or never end: a value over one is
// refused by Resolve, naming the key, before anything is allocated or
// written.
const (
	// MaxWorkers bounds data.num_workers: each worker fills, and holds,
	// a whole batch.
	MaxWorkers = 1024
	// MaxPrefetch bounds data.prefetch, the batches each worker loads
	// ahead.
	MaxPrefetch = 1024
	// MaxAccumulate bounds trainer.accumulate_grad_batches, the batches
	// one optimizer step loads and runs before it updates.
	MaxAccumulate = 1 << 16
	// MaxThreads bounds runtime.intra_op_threads and
	// runtime.inter_op_threads: ONNX Runtime starts its pools' threads
	// when a session opens.
	MaxThreads = 1024
	// MaxEpochs bounds trainer.max_epochs, which the trainer multiplies by
	// the steps of an epoch (below 2^32) into an int64.
	MaxEpochs = 1<<31 - 1
)

// indexBytes is what the loader holds per sample of a batch buffer besides
// its tensors (the sample's dataset index): the least a sample can cost.
const indexBytes = 8

// loaderBuffers is the number of batch buffers the loader plans for d
// (setup.LoaderConfig and data.New): one per worker being filled, the
// prefetched ones (data.prefetch per worker) and one held by the trainer.
// num_workers = 0 loads with one worker.
func loaderBuffers(d Data) int64 {
	w := int64(max(1, d.NumWorkers))
	return w + w*int64(d.Prefetch) + 1
}

// maxBatch is the largest data.batch_size whose batch buffers fit in the
// loader's memory bound even at indexBytes per sample, with the bound and
// where it comes from. The loader checks the real plan, tensors included,
// once the data's sample size is known (data.New); this bound needs none,
// so the sizes that would overflow that arithmetic are refused first.
func (c *Config) maxBatch() (most, limit int64, from string) {
	limit, from = int64(c.Data.MemoryLimit), "data.memory_limit"
	if limit == 0 {
		limit, from = data.PhysicalMemory(), "this machine's memory (data.memory_limit = 0)"
	}
	return limit / (indexBytes * loaderBuffers(c.Data)), limit, from
}

// formatBytes writes a byte count with a binary unit.
func formatBytes(n int64) string { return data.FormatBytes(n) }
