package data

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Dataset is a random-access source of samples.
type Dataset interface {
	// Len is the number of samples.
	Len() int
	// Spec names the tensors of one sample, in the order Load gets them.
	Spec() []TensorSpec
	// Load writes every element of sample i into dst. Random augmentation
	// must draw only from rng, which the loader seeds from (seed, epoch, i)
	// so that a sample does not depend on which worker loads it or when.
	// Load is called from several goroutines at once. Errors for bad input
	// name the file and what is wrong with it.
	Load(i int, rng *rand.Rand, dst Sample) error
}

// Cacher is implemented by datasets that keep decoded data in host memory
// (a decoded-volume cache, say). CacheBytes is the bound of that cache; the
// loader counts it against Config.MaxBytes.
type Cacher interface {
	CacheBytes() int64
}

// Config sets up a Loader.
type Config struct {
	// BatchSize is the number of samples per batch on this rank.
	BatchSize int
	// Workers is the number of goroutines filling batches; each fills a
	// whole batch.
	Workers int
	// Prefetch is the number of finished batches that may wait for the
	// consumer.
	Prefetch int
	// MaxBytes bounds the host memory the loader holds: its batch buffers
	// plus the dataset's cache (see Cacher). A plan over it refuses to start.
	MaxBytes int64
	// Seed drives shuffling and every sample's augmentation.
	Seed uint64
	// Shuffle permutes the samples anew each epoch.
	Shuffle bool
	// DropLast drops the last batch of an epoch when it is short and, in a
	// sharded run, the samples that do not divide evenly among the ranks;
	// without it the last batch is short and ranks wrap around to the start
	// of the epoch's order so that all get the same count.
	DropLast bool
	// Rank and WorldSize shard each epoch's order for data-parallel runs:
	// rank r gets positions r, r+W, r+2W, … WorldSize 0 means 1.
	Rank, WorldSize int
	// SkipBadFiles drops samples whose Load fails (counted in Stats.Skipped
	// and Batch.Skipped) instead of stopping with the error.
	SkipBadFiles bool
	// Epochs is the number of epochs after which Next returns io.EOF;
	// 0 runs forever.
	Epochs int
	// Mix, when set, transforms each filled batch as a whole (MixUp and
	// CutMix mix samples with each other), drawing from rng, which is
	// seeded from the batch's position alone so a resumed run mixes alike.
	Mix func(b *Batch, rng *rand.Rand) error
}

// Cursor is where a Loader stands: Position batches of Epoch have been
// delivered. Checkpoints store it (it marshals to JSON) and Loader.Resume
// continues from it.
type Cursor struct {
	Epoch    int `json:"epoch"`
	Position int `json:"position"`
}

// Batch is a set of named tensors whose first dimension is the number of
// samples. The loader reuses its buffers: a Batch is valid until the next
// call to Next, Resume or Close.
type Batch struct {
	Tensors []*Tensor
	// Indices are the dataset indices of the rows.
	Indices []int
	// Cursor is where the loader resumes after this batch.
	Cursor Cursor
	// Skipped counts the samples of this batch dropped as bad files, and
	// those of the batches before it that were dropped whole
	// (SkippedBefore).
	Skipped, SkippedBefore int
	// Wait is how long Next blocked for this batch: time the trainer's
	// accelerator starved on data.
	Wait time.Duration

	at      Cursor
	done    chan error
	samples []int // rows per tensor before truncation
}

// Epoch is the epoch the batch's samples come from.
func (b *Batch) Epoch() int { return b.at.Epoch }

// Tensor returns the batch's tensor called name, or nil.
func (b *Batch) Tensor(name string) *Tensor {
	for _, t := range b.Tensors {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// Stats are a loader's counters since New.
type Stats struct {
	Batches, Samples, Skipped int64
	// Wait is the total time Next blocked.
	Wait time.Duration
	// HeldBytes and PeakBytes are what the loader holds now and at most:
	// batch buffers allocated plus the dataset's cache bound.
	HeldBytes, PeakBytes int64
}

// Loader delivers batches of a Dataset in a deterministic order.
type Loader struct {
	ds         Dataset
	cfg        Config
	spec       []TensorSpec
	batchBytes int64
	cacheBytes int64
	nbuf       int
	perRank    int // samples per rank per epoch
	perEpoch   int // batches per rank per epoch

	all  []*Batch
	free chan *Batch
	held atomic.Int64
	peak atomic.Int64

	next    Cursor
	cur     *Batch
	err     error
	running bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	order   chan *Batch

	batches, samples, skipped atomic.Int64
	wait                      atomic.Int64
}

// New checks cfg against ds and plans the loader's memory: Workers +
// Prefetch + 1 batch buffers (one per worker being filled, Prefetch waiting,
// one held by the consumer) plus the dataset's cache. A plan over
// cfg.MaxBytes is an error naming the numbers. Nothing runs until Next.
func New(ds Dataset, cfg Config) (*Loader, error) {
	if cfg.WorldSize == 0 {
		cfg.WorldSize = 1
	}
	switch {
	case cfg.BatchSize < 1:
		return nil, fmt.Errorf("data: batch size %d, want ≥ 1", cfg.BatchSize)
	case cfg.Workers < 1:
		return nil, fmt.Errorf("data: %d workers, want ≥ 1", cfg.Workers)
	case cfg.Prefetch < 0:
		return nil, fmt.Errorf("data: prefetch %d, want ≥ 0", cfg.Prefetch)
	case cfg.MaxBytes <= 0:
		return nil, fmt.Errorf("data: memory bound %d bytes, want > 0", cfg.MaxBytes)
	case cfg.WorldSize < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.WorldSize:
		return nil, fmt.Errorf("data: rank %d of world size %d", cfg.Rank, cfg.WorldSize)
	case cfg.Epochs < 0:
		return nil, fmt.Errorf("data: %d epochs, want ≥ 0", cfg.Epochs)
	}
	l := &Loader{ds: ds, cfg: cfg, spec: ds.Spec()}
	n := ds.Len()
	if cfg.DropLast {
		l.perRank = n / cfg.WorldSize
		l.perEpoch = l.perRank / cfg.BatchSize
	} else {
		l.perRank = (n + cfg.WorldSize - 1) / cfg.WorldSize
		l.perEpoch = (l.perRank + cfg.BatchSize - 1) / cfg.BatchSize
	}
	if l.perEpoch == 0 {
		return nil, fmt.Errorf("data: %d samples make no batch of %d on each of %d ranks", n, cfg.BatchSize, cfg.WorldSize)
	}
	// The plan is summed saturating at MaxInt64: sizes large enough to
	// overflow it are over any bound, and must be refused as such rather
	// than wrap to a small number and panic allocating (a batch of 10^18).
	var sample int64 = 8 // Indices
	for _, s := range l.spec {
		sample = addSat(sample, s.Bytes())
	}
	l.batchBytes = mulSat(sample, int64(cfg.BatchSize))
	if c, ok := ds.(Cacher); ok {
		l.cacheBytes = c.CacheBytes()
	}
	nbuf := addSat(addSat(int64(cfg.Workers), int64(cfg.Prefetch)), 1)
	if plan := addSat(mulSat(nbuf, l.batchBytes), l.cacheBytes); plan > cfg.MaxBytes || plan == math.MaxInt64 {
		return nil, &PlanError{Plan: plan, Bound: cfg.MaxBytes, Workers: cfg.Workers, Prefetch: cfg.Prefetch, BatchSize: cfg.BatchSize, BatchBytes: l.batchBytes, CacheBytes: l.cacheBytes}
	}
	l.nbuf = int(nbuf)
	l.free = make(chan *Batch, l.nbuf)
	l.held.Store(l.cacheBytes)
	l.peak.Store(l.cacheBytes)
	return l, nil
}

// PlanError is a loader whose memory plan is over its bound
// (Config.MaxBytes): a batch, worker or prefetch count too large for the
// machine, which the user fixes in the configuration.
type PlanError struct {
	Plan, Bound            int64 // bytes; Plan is MaxInt64 when it overflows
	Workers, Prefetch      int
	BatchSize              int
	BatchBytes, CacheBytes int64
}

// Error names the plan, its parts and the settings that size them.
func (e *PlanError) Error() string {
	plan := FormatBytes(e.Plan)
	if e.Plan == math.MaxInt64 {
		plan = "over 8 EiB"
	}
	return fmt.Sprintf("data: memory plan of %s is over the bound of %s: (%d workers + %d prefetch + 1 held) × %s per batch of %d + %s dataset cache; lower data.batch_size, data.num_workers or data.prefetch (or raise data.memory_limit)",
		plan, FormatBytes(e.Bound), e.Workers, e.Prefetch, FormatBytes(e.BatchBytes), e.BatchSize, FormatBytes(e.CacheBytes))
}

// BadInput marks the error as the user's to fix (exit code 2).
func (e *PlanError) BadInput() bool { return true }

// addSat and mulSat add and multiply non-negative sizes, saturating at
// MaxInt64 instead of wrapping.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func mulSat(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// BatchesPerEpoch is the number of batches this rank gets each epoch.
func (l *Loader) BatchesPerEpoch() int { return l.perEpoch }

// PlanBytes is the most host memory the loader will hold.
func (l *Loader) PlanBytes() int64 { return int64(l.nbuf)*l.batchBytes + l.cacheBytes }

// Cursor is where the next call to Next continues.
func (l *Loader) Cursor() Cursor { return l.next }

// Stats returns the loader's counters.
func (l *Loader) Stats() Stats {
	return Stats{
		Batches:   l.batches.Load(),
		Samples:   l.samples.Load(),
		Skipped:   l.skipped.Load(),
		Wait:      time.Duration(l.wait.Load()),
		HeldBytes: l.held.Load(),
		PeakBytes: l.peak.Load(),
	}
}

// Resume makes the next batch the one an uninterrupted run would deliver
// after c. It stops the running pipeline, if any; batches already handed
// out become invalid.
func (l *Loader) Resume(c Cursor) error {
	if c.Epoch < 0 || c.Position < 0 || c.Position > l.perEpoch {
		return fmt.Errorf("data: cannot resume from epoch %d position %d: an epoch has %d batches", c.Epoch, c.Position, l.perEpoch)
	}
	if c.Position == l.perEpoch {
		c = Cursor{c.Epoch + 1, 0}
	}
	l.stop()
	l.next, l.err = c, nil
	return nil
}

// Close stops the workers. The loader can go on after Resume.
func (l *Loader) Close() { l.stop() }

// Next returns the next batch, io.EOF after Config.Epochs epochs, or the
// first error of a sample's Load (then again on every call until Resume).
// The previous batch's buffers are reused.
func (l *Loader) Next() (*Batch, error) {
	if l.err != nil {
		return nil, l.err
	}
	if l.cur != nil {
		l.free <- l.cur
		l.cur = nil
	}
	if !l.running {
		l.start()
	}
	t0 := time.Now()
	carried := 0 // the bad samples of batches dropped whole
	for {
		b, ok := <-l.order
		if !ok {
			l.err = io.EOF
			return nil, l.err
		}
		if err := <-b.done; err != nil {
			l.free <- b
			l.err = err
			l.stop()
			return nil, err
		}
		l.next = b.Cursor
		l.skipped.Add(int64(b.Skipped))
		if len(b.Indices) == 0 { // every sample was a bad file
			carried += b.Skipped
			l.free <- b
			continue
		}
		b.Skipped += carried
		b.SkippedBefore = carried
		b.Wait = time.Since(t0)
		l.wait.Add(int64(b.Wait))
		l.batches.Add(1)
		l.samples.Add(int64(len(b.Indices)))
		l.cur = b
		return b, nil
	}
}

// start launches the dispatcher and the workers from l.next.
func (l *Loader) start() {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel, l.running = cancel, true
	jobs := make(chan *Batch, l.nbuf)
	l.order = make(chan *Batch, l.nbuf)
	l.wg.Add(1 + l.cfg.Workers)
	go l.dispatch(ctx, jobs)
	for range l.cfg.Workers {
		go l.work(ctx, jobs)
	}
}

// stop cancels the pipeline, waits for it and takes every buffer back.
func (l *Loader) stop() {
	if !l.running {
		return
	}
	l.cancel()
	l.wg.Wait()
	l.running, l.cur = false, nil
	for len(l.free) > 0 {
		<-l.free
	}
	for _, b := range l.all {
		select {
		case <-b.done:
		default:
		}
		l.free <- b
	}
}

// acquire returns a free batch buffer, allocating one while fewer than the
// plan's exist. Only the dispatcher calls it.
func (l *Loader) acquire(ctx context.Context) *Batch {
	select {
	case b := <-l.free:
		return b
	default:
	}
	if len(l.all) < l.nbuf {
		b := &Batch{Indices: make([]int, l.cfg.BatchSize), done: make(chan error, 1)}
		for _, s := range l.spec {
			b.Tensors = append(b.Tensors, newTensor(s, l.cfg.BatchSize))
			b.samples = append(b.samples, s.Elems())
		}
		l.all = append(l.all, b)
		held := l.held.Add(l.batchBytes)
		if held > l.peak.Load() {
			l.peak.Store(held)
		}
		return b
	}
	select {
	case b := <-l.free:
		return b
	case <-ctx.Done():
		return nil
	}
}

// dispatch hands out batch positions in order, to the workers and, in the
// same order, to Next.
func (l *Loader) dispatch(ctx context.Context, jobs chan<- *Batch) {
	defer l.wg.Done()
	c := l.next
	var order []int
	for l.cfg.Epochs == 0 || c.Epoch < l.cfg.Epochs {
		if order == nil {
			order = l.epochOrder(c.Epoch)
		}
		b := l.acquire(ctx)
		if b == nil {
			return
		}
		lo := c.Position * l.cfg.BatchSize
		hi := min(lo+l.cfg.BatchSize, l.perRank)
		b.Indices = b.Indices[:hi-lo]
		copy(b.Indices, order[lo:hi])
		b.at = c
		c.Position++
		if c.Position == l.perEpoch {
			c, order = Cursor{c.Epoch + 1, 0}, nil
		}
		b.Cursor = c
		select {
		case jobs <- b:
		case <-ctx.Done():
			return
		}
		select {
		case l.order <- b:
		case <-ctx.Done():
			return
		}
	}
	close(l.order)
}

// work fills batches until the pipeline stops.
func (l *Loader) work(ctx context.Context, jobs <-chan *Batch) {
	defer l.wg.Done()
	src := rand.NewPCG(0, 0)
	rng := rand.New(src)
	sample := make(Sample, len(l.spec))
	for {
		select {
		case b := <-jobs:
			b.done <- l.fill(b, src, rng, sample)
		case <-ctx.Done():
			return
		}
	}
}

// fill loads the samples of b, compacting out bad files when skipping.
func (l *Loader) fill(b *Batch, src *rand.PCG, rng *rand.Rand, sample Sample) error {
	rows := len(b.Indices)
	for i, t := range b.Tensors {
		t.truncate(l.cfg.BatchSize, b.samples[i])
	}
	b.Skipped = 0
	k := 0
	for r := range rows {
		idx := b.Indices[r]
		src.Seed(SampleSeed(l.cfg.Seed, b.at.Epoch, idx))
		for i, t := range b.Tensors {
			t.row(k, b.samples[i], &sample[i])
		}
		if err := l.ds.Load(idx, rng, sample); err != nil {
			if !l.cfg.SkipBadFiles {
				return err
			}
			b.Skipped++
			continue
		}
		b.Indices[k] = idx
		k++
	}
	b.Indices = b.Indices[:k]
	for i, t := range b.Tensors {
		t.truncate(k, b.samples[i])
	}
	if l.cfg.Mix != nil && k > 0 {
		src.Seed(SampleSeed(l.cfg.Seed^batchStream, b.at.Epoch, b.at.Position))
		return l.cfg.Mix(b, rng)
	}
	return nil
}

// batchStream sets the batch transforms' random stream apart from the
// samples'.
const batchStream = 0x6d69786d6978

// epochOrder is this rank's sample order for an epoch.
func (l *Loader) epochOrder(epoch int) []int {
	n := l.ds.Len()
	var perm []int
	if l.cfg.Shuffle {
		perm = rand.New(rand.NewPCG(l.cfg.Seed, mix(uint64(epoch)))).Perm(n)
	} else {
		perm = make([]int, n)
		for i := range perm {
			perm[i] = i
		}
	}
	out := make([]int, l.perRank)
	for i := range out {
		out[i] = perm[(i*l.cfg.WorldSize+l.cfg.Rank)%n]
	}
	return out
}

// SampleSeed is the PCG seed of sample index in epoch: the augmentation of a
// sample depends on nothing else.
func SampleSeed(seed uint64, epoch, index int) (uint64, uint64) {
	return mix(seed ^ mix(uint64(epoch))), mix(uint64(index) + 0x9e3779b97f4a7c15)
}

// mix is SplitMix64's finaliser: nearby inputs give unrelated outputs.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// FormatBytes writes n in binary units for messages.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
