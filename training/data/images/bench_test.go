package images

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/loadbench"
	"github.com/ortrain/ortrain/training/data/synthetic"
)

// imagenetLike writes n ImageNet-sized JPEGs: 500×375, quality 90, about
// 110 KB each.
func imagenetLike(b *testing.B, n int) []Item {
	dir := b.TempDir()
	var items []Item
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("%d.jpg", i))
		if err := synthetic.WriteImage(p, synthetic.Photo(500, 375, i, rand.New(rand.NewPCG(7, uint64(i))))); err != nil {
			b.Fatal(err)
		}
		items = append(items, Item{p, i})
	}
	return items
}

// BenchmarkDecode is one core decoding, cropping and normalising
// ImageNet-sized JPEGs with each decoder: the images/s per core that decide
// how many cores keep a ResNet-50 GPU busy. images/cpu-s divides by the
// process's CPU time instead of the wall time, which on a shared machine
// also counts the time other work held the core. The sample's buffers are
// reused, as the loader's are.
func BenchmarkDecode(b *testing.B) {
	items := imagenetLike(b, 16)
	for _, dec := range []struct {
		name string
		d    Decoder
	}{{"libjpeg-turbo", LibJPEGTurbo}, {"image-jpeg", GoJPEG}} {
		for _, train := range []bool{true, false} {
			name := dec.name + "/val"
			if train {
				name = dec.name + "/train"
			}
			b.Run(name, func(b *testing.B) {
				ds, _ := New(items, Config{Train: train, Decoder: dec.d})
				s := data.Sample{{Name: "image", DType: data.Float32, F32: make([]float32, ds.Spec()[0].Elems())}, {Name: "label", DType: data.Int64, I64: make([]int64, 1)}}
				n := 0
				cpu0 := loadbench.CPUSeconds()
				for b.Loop() {
					if err := ds.Load(n%len(items), rand.New(rand.NewPCG(uint64(n), 0)), s); err != nil {
						b.Fatal(err)
					}
					n++
				}
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "images/s/core")
				if cpu := loadbench.CPUSeconds() - cpu0; cpu0 >= 0 && cpu > 0 {
					b.ReportMetric(float64(n)/cpu, "images/cpu-s")
				}
			})
		}
	}
}

// BenchmarkLoader is the training pipeline through the loader: samples/s
// in total and per worker.
func BenchmarkLoader(b *testing.B) {
	items := imagenetLike(b, 64)
	ds, _ := New(items, Config{Train: true})
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			loadbench.Run(b, ds, data.Config{BatchSize: 32, Workers: workers, Prefetch: 2, MaxBytes: 1 << 30, Shuffle: true})
		})
	}
}
