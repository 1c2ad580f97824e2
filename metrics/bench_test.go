package metrics

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// benchVolume returns a pair of CT-like float32 volumes: a smooth field in
// [-1024, 3071] and a copy with noise of amplitude ±40, generated in
// parallel with a xorshift generator.
func benchVolume(shape ...int) (x, y Volume) {
	n := 1
	for _, s := range shape {
		n *= s
	}
	x = Volume{make([]float32, n), shape}
	y = Volume{make([]float32, n), shape}
	plane := n / shape[0]
	parallelFor(shape[0], func(lo, hi int) {
		s := uint64(lo)*0x9E3779B97F4A7C15 + 1
		for i := lo * plane; i < hi*plane; i++ {
			s ^= s << 13
			s ^= s >> 7
			s ^= s << 17
			v := float32(i%plane)/float32(plane)*3000 - 1024 + float32(i/plane)
			x.Data[i] = v
			y.Data[i] = 0.98*v + float32(s>>40)/float32(1<<24)*80 - 40
		}
	})
	// Free the garbage of earlier benchmarks now rather than while timing.
	debug.FreeOSMemory()
	return x, y
}

// reportCPU adds the process CPU time per operation to b's results: on a
// machine shared with other work it shows the cost even when wall time
// does not.
func reportCPU(b *testing.B, start float64) {
	if c := cpuSeconds(); c >= 0 && start >= 0 {
		b.ReportMetric((c-start)/float64(b.N), "cpu-s/op")
	}
	b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "procs")
}

// BenchmarkSSIM3D measures SSIM with the 11-sample Gaussian window on a
// 512×512×604 float32 CT-sized volume (633 MB per input).
func BenchmarkSSIM3D(b *testing.B) {
	if testing.Short() {
		b.Skip("skipping the 512×512×604 SSIM benchmark in -short mode: it needs 1.3 GB for its inputs")
	}
	x, y := benchVolume(604, 512, 512)
	opt := GaussianOptions(4095)
	b.SetBytes(int64(len(x.Data)) * 8)
	start := cpuSeconds()
	b.ResetTimer()
	for b.Loop() {
		if _, err := SSIM(x, y, opt); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}

// BenchmarkPSNR measures PSNR on two 512×512×604 float32 volumes.
func BenchmarkPSNR(b *testing.B) {
	if testing.Short() {
		b.Skip("skipping the 512×512×604 PSNR benchmark in -short mode: it needs 1.3 GB for its inputs")
	}
	x, y := benchVolume(604, 512, 512)
	b.SetBytes(int64(len(x.Data)) * 8)
	start := cpuSeconds()
	b.ResetTimer()
	for b.Loop() {
		if _, err := PSNR(x.Data, y.Data, 4095); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}

// BenchmarkSSIM2D measures SSIM on a 512×512 image, the per-slice cost.
func BenchmarkSSIM2D(b *testing.B) {
	x, y := benchVolume(1, 512, 512)
	x.Shape, y.Shape = x.Shape[1:], y.Shape[1:]
	opt := GaussianOptions(4095)
	start := cpuSeconds()
	b.ResetTimer()
	for b.Loop() {
		if _, err := SSIM(x, y, opt); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}
