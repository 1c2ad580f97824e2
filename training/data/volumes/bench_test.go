package volumes

import (
	"fmt"
	"testing"

	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/loadbench"
)

// BenchmarkLoader cuts 64×64×48 patches (stride 48×48×32) out of eight
// 128×128×96 phantoms held in the cache: samples/s in total and per worker,
// once each volume's gzip has been paid.
func BenchmarkLoader(b *testing.B) {
	files := phantoms(b, 8, [3]int{128, 128, 96})
	ds, err := New(Config{Files: files, TrainSplit: 1, PatchSize: [3]int{64, 64, 48}, Stride: [3]int{48, 48, 32}, Window: Window{-1000, 1000}, CacheBytes: 8 * 128 * 128 * 96 * 4})
	if err != nil {
		b.Fatal(err)
	}
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			loadbench.Run(b, ds, data.Config{BatchSize: 4, Workers: workers, Prefetch: 2, MaxBytes: 1 << 30, Shuffle: true})
		})
	}
}

// BenchmarkDecode is the price of a cache miss: reading (the gzip trailer
// and the voxels' finiteness checked) and windowing one gzipped
// 128×128×96 volume (6.3 MB as float32).
func BenchmarkDecode(b *testing.B) {
	files := phantoms(b, 1, [3]int{128, 128, 96})
	n := 0
	for b.Loop() {
		v, err := Read(files[0])
		if err != nil {
			b.Fatal(err)
		}
		Apply(Window{-1000, 1000}, v.Data)
		n++
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "volumes/s")
	b.ReportMetric(float64(n)*128*128*96*4/1e6/b.Elapsed().Seconds(), "MB/s")
}

// BenchmarkCheckFinite is the NaN/Inf check Read makes of every volume, on
// BenchmarkDecode's 128×128×96 voxels: a small part of a decode's price.
func BenchmarkCheckFinite(b *testing.B) {
	v := make([]float32, 128*128*96)
	n := 0
	for b.Loop() {
		if err := checkFinite("x", v); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(n)*float64(len(v))*4/1e6/b.Elapsed().Seconds(), "MB/s")
}
