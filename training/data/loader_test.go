package data

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// counting is a dataset whose sample i is (i, a random draw, a mask byte);
// samples listed in bad fail like a corrupt file, and delay slows Load down
// so that workers finish out of order.
type counting struct {
	n     int
	bad   map[int]bool
	delay func(i int) time.Duration
}

func (c *counting) Len() int { return c.n }

func (c *counting) Spec() []TensorSpec {
	return []TensorSpec{
		{Name: "x", DType: Float32, Shape: []int{2, 3}},
		{Name: "id", DType: Int64, Shape: []int{1}},
		{Name: "mask", DType: Uint8, Shape: []int{4}},
	}
}

func (c *counting) Load(i int, rng *rand.Rand, dst Sample) error {
	if c.delay != nil {
		time.Sleep(c.delay(i))
	}
	if c.bad[i] {
		return fmt.Errorf("sample%03d.bin: truncated", i)
	}
	x := dst.Get("x").F32
	for j := range x {
		x[j] = float32(i) + rng.Float32()
	}
	dst.Get("id").I64[0] = int64(i)
	m := dst.Get("mask").U8
	for j := range m {
		m[j] = uint8(i + j)
	}
	return nil
}

// fingerprint is one batch as comparable values.
type fingerprint struct {
	Cursor Cursor
	IDs    []int64
	X      []float32
	Mask   []uint8
}

func print(b *Batch) fingerprint {
	return fingerprint{b.Cursor, slices.Clone(b.Tensor("id").I64), slices.Clone(b.Tensor("x").F32), slices.Clone(b.Tensor("mask").U8)}
}

// take reads n batches.
func take(t *testing.T, l *Loader, n int) []fingerprint {
	t.Helper()
	var out []fingerprint
	for range n {
		b, err := l.Next()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, print(b))
	}
	return out
}

func jitter(i int) time.Duration { return time.Duration((i*7919)%5) * 100 * time.Microsecond }

func TestSameSeedSameBatchesWhateverTheWorkers(t *testing.T) {
	ds := &counting{n: 50, delay: jitter}
	var want []fingerprint
	for _, workers := range []int{1, 3, 8} {
		l, err := New(ds, Config{BatchSize: 4, Workers: workers, Prefetch: 2, MaxBytes: 1 << 20, Seed: 7, Shuffle: true})
		if err != nil {
			t.Fatal(err)
		}
		got := take(t, l, 30) // crosses two epoch boundaries (13 batches each)
		l.Close()
		if want == nil {
			want = got
			continue
		}
		if !equalPrints(got, want) {
			t.Errorf("%d workers gave other batches than 1 worker", workers)
		}
	}
	// Epochs are shuffled differently, and each covers every sample once.
	l, _ := New(ds, Config{BatchSize: 4, Workers: 2, MaxBytes: 1 << 20, Seed: 7, Shuffle: true})
	e0, e1 := idsOf(take(t, l, 13)), idsOf(take(t, l, 13))
	if slices.Equal(e0, e1) {
		t.Error("epochs 0 and 1 have the same order")
	}
	for e, ids := range [][]int64{e0, e1} {
		slices.Sort(ids)
		for i, id := range ids {
			if id != int64(i) {
				t.Fatalf("epoch %d does not hold each sample once: %v", e, ids)
			}
		}
	}
}

func TestResumeFromStoredCursorGivesTheSameBatches(t *testing.T) {
	ds := &counting{n: 37, delay: jitter}
	cfg := Config{BatchSize: 5, Workers: 3, Prefetch: 1, MaxBytes: 1 << 20, Seed: 42, Shuffle: true}
	l, err := New(ds, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := take(t, l, 20) // 8 batches per epoch: ends inside epoch 2
	for _, stop := range []int{0, 3, 7, 8, 13} {
		// A checkpoint stores the cursor after batch stop-1 as JSON.
		c := Cursor{}
		if stop > 0 {
			c = want[stop-1].Cursor
		}
		js, _ := json.Marshal(c)
		var back Cursor
		if err := json.Unmarshal(js, &back); err != nil {
			t.Fatal(err)
		}
		fresh, _ := New(ds, cfg)
		if err := fresh.Resume(back); err != nil {
			t.Fatal(err)
		}
		got := take(t, fresh, 20-stop)
		if !equalPrints(got, want[stop:]) {
			t.Errorf("resumed at %s, batches differ from an uninterrupted run", js)
		}
		fresh.Close()
	}
	// Resume on a running loader rewinds it.
	if err := l.Resume(want[2].Cursor); err != nil {
		t.Fatal(err)
	}
	if got := take(t, l, 4); !equalPrints(got, want[3:7]) {
		t.Error("Resume on a running loader did not rewind")
	}
	if err := l.Resume(Cursor{Epoch: 0, Position: 9}); err == nil {
		t.Error("Resume past the end of an epoch was accepted")
	}
}

func TestDropLastAndSharding(t *testing.T) {
	for _, tc := range []struct {
		name            string
		n, bs, world    int
		dropLast        bool
		batches, perRnk int
		lastRows        int
	}{
		{"short last batch kept", 10, 4, 1, false, 3, 10, 2},
		{"short last batch dropped", 10, 4, 1, true, 2, 8, 4},
		{"3 ranks wrap to even counts", 10, 2, 3, false, 2, 4, 2},
		{"3 ranks drop the remainder", 10, 2, 3, true, 1, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[int64]int{}
			for rank := range tc.world {
				l, err := New(&counting{n: tc.n}, Config{BatchSize: tc.bs, Workers: 2, MaxBytes: 1 << 20, Seed: 1, Shuffle: true, DropLast: tc.dropLast, Rank: rank, WorldSize: tc.world, Epochs: 1})
				if err != nil {
					t.Fatal(err)
				}
				if l.BatchesPerEpoch() != tc.batches {
					t.Errorf("rank %d: %d batches per epoch, want %d", rank, l.BatchesPerEpoch(), tc.batches)
				}
				rows, last := 0, 0
				for {
					b, err := l.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					last = len(b.Indices)
					rows += last
					if got := b.Tensor("x").Shape[0]; got != last {
						t.Errorf("x has %d rows, batch %d", got, last)
					}
					for _, id := range b.Tensor("id").I64 {
						seen[id]++
					}
				}
				if rows != tc.perRnk || last != tc.lastRows {
					t.Errorf("rank %d: %d samples, last batch %d; want %d and %d", rank, rows, last, tc.perRnk, tc.lastRows)
				}
			}
			if !tc.dropLast && len(seen) != tc.n {
				t.Errorf("ranks together saw %d distinct samples, want all %d", len(seen), tc.n)
			}
			if tc.dropLast {
				for id, k := range seen {
					if k > 1 {
						t.Errorf("sample %d went to %d ranks", id, k)
					}
				}
			}
		})
	}
}

func TestLoaderNeverHoldsMoreThanItsBound(t *testing.T) {
	ds := &counting{n: 200, delay: jitter}
	// One batch: 8 × (24 + 8 + 4) bytes of tensors + 8 × 8 of indices = 352.
	for _, tc := range []struct {
		workers, prefetch int
		bound             int64
		ok                bool
	}{
		{4, 3, 8 * 352, true},
		{4, 3, 8*352 - 1, false},
		{1, 0, 2 * 352, true},
		{2, 8, 3000, false},
	} {
		l, err := New(ds, Config{BatchSize: 8, Workers: tc.workers, Prefetch: tc.prefetch, MaxBytes: tc.bound, Shuffle: true})
		if !tc.ok {
			if err == nil || !strings.Contains(err.Error(), "over the bound") || !strings.Contains(err.Error(), fmt.Sprintf("%d workers + %d prefetch", tc.workers, tc.prefetch)) {
				t.Errorf("workers %d prefetch %d bound %d: got %v, want a refusal naming the plan", tc.workers, tc.prefetch, tc.bound, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for range 60 {
			if _, err := l.Next(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Microsecond) // a slow consumer lets every buffer fill
			if s := l.Stats(); s.HeldBytes > tc.bound {
				t.Fatalf("holds %d bytes, bound %d", s.HeldBytes, tc.bound)
			}
		}
		l.Close()
		if s := l.Stats(); s.PeakBytes > tc.bound || s.PeakBytes != l.PlanBytes() {
			t.Errorf("workers %d prefetch %d: peak %d bytes, plan %d, bound %d", tc.workers, tc.prefetch, s.PeakBytes, l.PlanBytes(), tc.bound)
		}
	}
}

// TestAbsurdSizesAreRefused: sizes whose plan overflows int64 (a batch,
// worker or prefetch count of 10^18) are refused as a plan over the bound,
// an error the user fixes (BadInput), not wrapped to a small plan that
// panics allocating its buffers or channel.
func TestAbsurdSizesAreRefused(t *testing.T) {
	ds := &counting{n: 200}
	const huge = 1_000_000_000_000_000_000
	for _, cfg := range []Config{
		{BatchSize: huge, Workers: 1, Prefetch: 1},
		{BatchSize: 1 << 40, Workers: 4, Prefetch: 8, MaxBytes: 16 << 30},
		{BatchSize: 8, Workers: huge, Prefetch: 1},
		{BatchSize: 8, Workers: 1, Prefetch: huge},
		{BatchSize: 8, Workers: math.MaxInt, Prefetch: math.MaxInt},
	} {
		if cfg.MaxBytes == 0 {
			cfg.MaxBytes = math.MaxInt64 // plan's setting: only an overflow is over it
		}
		l, err := New(ds, cfg)
		var pe *PlanError
		if !errors.As(err, &pe) || !pe.BadInput() || !strings.Contains(err.Error(), "data.batch_size") {
			t.Errorf("batch %d, %d workers, prefetch %d: got %v, want a PlanError naming the keys", cfg.BatchSize, cfg.Workers, cfg.Prefetch, err)
		}
		if l != nil {
			l.Close()
		}
	}
}

func TestBadFilesFailOrAreSkipped(t *testing.T) {
	ds := &counting{n: 12, bad: map[int]bool{3: true, 4: true, 5: true, 9: true}}
	l, _ := New(ds, Config{BatchSize: 3, Workers: 2, MaxBytes: 1 << 20, Epochs: 1})
	var err error
	for err == nil {
		_, err = l.Next()
	}
	if err == io.EOF || !strings.Contains(err.Error(), "sample003.bin: truncated") {
		t.Errorf("got %v, want the error naming sample003.bin", err)
	}
	if _, again := l.Next(); again != err {
		t.Errorf("after a failure Next returned %v", again)
	}

	l, _ = New(ds, Config{BatchSize: 3, Workers: 2, MaxBytes: 1 << 20, Epochs: 1, SkipBadFiles: true})
	var ids []int64
	for {
		b, err := l.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, b.Tensor("id").I64...)
	}
	if want := []int64{0, 1, 2, 6, 7, 8, 10, 11}; !slices.Equal(ids, want) {
		t.Errorf("skipping bad files gave samples %v, want %v", ids, want)
	}
	if s := l.Stats(); s.Skipped != 4 || s.Samples != 8 {
		t.Errorf("stats %+v, want 4 skipped and 8 samples", s)
	}
}

func TestWaitTimeIsReported(t *testing.T) {
	ds := &counting{n: 8, delay: func(int) time.Duration { return 2 * time.Millisecond }}
	l, _ := New(ds, Config{BatchSize: 4, Workers: 1, MaxBytes: 1 << 20})
	b, err := l.Next()
	if err != nil {
		t.Fatal(err)
	}
	if b.Wait < 8*time.Millisecond {
		t.Errorf("first batch of 4 × 2 ms samples waited %v", b.Wait)
	}
	if l.Stats().Wait != b.Wait {
		t.Errorf("stats wait %v, batch wait %v", l.Stats().Wait, b.Wait)
	}
	l.Close()
}

func TestBuffersAreReusedOnceWarm(t *testing.T) {
	l, _ := New(&counting{n: 64}, Config{BatchSize: 8, Workers: 2, Prefetch: 1, MaxBytes: 1 << 20})
	take(t, l, 20)
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := l.Next(); err != nil {
			t.Fatal(err)
		}
	})
	// One permutation per 8-batch epoch is the only allocation left.
	if allocs > 1 {
		t.Errorf("%.1f allocations per batch once warm", allocs)
	}
	l.Close()
}

func equalPrints(a, b []fingerprint) bool {
	return slices.EqualFunc(a, b, func(x, y fingerprint) bool {
		return x.Cursor == y.Cursor && slices.Equal(x.IDs, y.IDs) && slices.Equal(x.X, y.X) && slices.Equal(x.Mask, y.Mask)
	})
}

func idsOf(ps []fingerprint) []int64 {
	var ids []int64
	for _, p := range ps {
		ids = append(ids, p.IDs...)
	}
	return ids
}

// TestMixIsReproducible: a batch transform draws from a stream seeded by
// the batch's position: the same whatever the workers, and again after a
// resume, while differing from batch to batch.
func TestMixIsReproducible(t *testing.T) {
	ds := &counting{n: 37, delay: jitter}
	shift := func(b *Batch, rng *rand.Rand) error {
		d := rng.Float32()
		for i := range b.Tensor("x").F32 {
			b.Tensor("x").F32[i] += d
		}
		return nil
	}
	cfg := Config{BatchSize: 5, Workers: 1, Prefetch: 1, MaxBytes: 1 << 20, Seed: 42, Shuffle: true, Mix: shift}
	l, _ := New(ds, cfg)
	want := take(t, l, 12)
	l.Close()
	plain := cfg
	plain.Mix = nil
	p, _ := New(ds, plain)
	if equalPrints(take(t, p, 12), want) {
		t.Error("Mix changed nothing")
	}
	p.Close()
	cfg.Workers = 3
	fresh, _ := New(ds, cfg)
	defer fresh.Close()
	if err := fresh.Resume(want[4].Cursor); err != nil {
		t.Fatal(err)
	}
	if !equalPrints(take(t, fresh, 7), want[5:]) {
		t.Error("mixed batches differ after a resume with other workers")
	}
}
