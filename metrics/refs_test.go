package metrics

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

// refCase is one entry of testdata/refs.json, written by
// testdata/make_refs.py from scikit-image 0.19.3 (Debian 12). Reference
// values absent for a case are NaN.
type refCase struct {
	Name        string
	Kind        string // "noise" or "smooth", see genCase
	Shape       []int
	Seed        uint64
	Amp, Gain   float64
	Scale       float64
	Offset      float64
	DataRange   float64 `json:"data_range"`
	ChecksumX   uint64  `json:"checksum_x"`
	ChecksumY   uint64  `json:"checksum_y"`
	PSNR, MSE   float64
	MAE         float64
	Gaussian    float64 `json:"ssim_gaussian"`
	GaussianF32 float64 `json:"ssim_gaussian_f32"`
	Uniform     float64 `json:"ssim_uniform"`
	UniformPop  float64 `json:"ssim_uniform_population"`
	MSSSIM      float64 `json:"msssim"`
}

func loadRefs(t testing.TB) []refCase {
	t.Helper()
	b, err := os.ReadFile("testdata/refs.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Cases []json.RawMessage }
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	cases := make([]refCase, len(f.Cases))
	for i, raw := range f.Cases {
		nan := math.NaN()
		cases[i] = refCase{Gaussian: nan, GaussianF32: nan, MSSSIM: nan}
		if err := json.Unmarshal(raw, &cases[i]); err != nil {
			t.Fatal(err)
		}
	}
	return cases
}

// splitmix returns SplitMix64 outputs seed+1..seed+n as float64 in [0, 1),
// as uniform() in make_refs.py.
func splitmix(seed uint64, n int) []float64 {
	u := make([]float64, n)
	for i := range u {
		z := seed + uint64(i+1)*0x9E3779B97F4A7C15
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		z ^= z >> 31
		u[i] = float64(z>>11) * 0x1p-53
	}
	return u
}

// genCase builds the float32 inputs of c exactly as gen() in make_refs.py:
// x is noise (uniform in [0, 1)) or a smooth polynomial of the coordinates
// scaled to [0, 1]; y = x·Gain + Amp·(noise - 0.5); both are then mapped by
// v·Scale + Offset. Every operation is an explicitly rounded float64 +, -,
// * or /, so the data match numpy's bit for bit.
func genCase(c refCase) (x, y Volume) {
	n := 1
	for _, s := range c.Shape {
		n *= s
	}
	noise := splitmix(c.Seed+1, n)
	var xv []float64
	if c.Kind == "noise" {
		xv = splitmix(c.Seed, n)
	} else {
		xv = make([]float64, n)
		nd := len(c.Shape)
		idx := make([]int, nd)
		coord := func(a int) float64 { return float64(idx[a]) / float64(c.Shape[a]-1) }
		for i := range xv {
			u, v, w := coord(0), coord(1), coord(nd-1)
			p := float64(0.5 + float64(float64(0.25*u)*float64(1.0-v)))
			p = float64(p + float64(float64(0.2*v)*w))
			xv[i] = float64(p - float64(float64(0.15*u)*w))
			for a := nd - 1; a >= 0; a-- {
				if idx[a]++; idx[a] < c.Shape[a] {
					break
				}
				idx[a] = 0
			}
		}
	}
	x = Volume{make([]float32, n), c.Shape}
	y = Volume{make([]float32, n), c.Shape}
	for i, v := range xv {
		w := float64(float64(v*c.Gain) + float64(c.Amp*float64(noise[i]-0.5)))
		x.Data[i] = float32(float64(float64(v*c.Scale) + c.Offset))
		y.Data[i] = float32(float64(float64(w*c.Scale) + c.Offset))
	}
	return x, y
}

// checksum is Σ (i+1)·bits(v[i]) mod 2^64, as in make_refs.py.
func checksum(v []float32) uint64 {
	var s uint64
	for i, e := range v {
		s += uint64(i+1) * uint64(math.Float32bits(e))
	}
	return s
}

func relErr(got, want float64) float64 {
	return math.Abs(got-want) / math.Max(math.Abs(want), math.SmallestNonzeroFloat64)
}

// TestReferences compares every metric with scikit-image (and MS-SSIM with
// the numpy transcription of torchmetrics) on the cases of refs.json.
//
// Tolerances: the references are float64 computations on the same float32
// data, so the only differences are float64 rounding in a different order
// (scipy filters axis 0 first and its uniform filter keeps a running sum;
// numpy sums pairwise). Rounding errors of order 1e-16 relative in local
// means are amplified by the cancellation in E[x²]-E[x]², at worst by about
// mean²/variance ≈ 1e4 for these inputs (the CT case: offset -1024, noise
// amplitude 80), giving at most about 1e-12 in SSIM. PSNR, MSE and MAE are
// plain sums. The largest error seen is 3e-14 (MSE), 1e-14 for SSIM and
// MS-SSIM; the bounds below leave room for other compilers and CPUs (e.g.
// fused multiply-add on arm64) while still catching any change of formula,
// window or crop, which moves SSIM by 1e-4 or more.
func TestReferences(t *testing.T) {
	const (
		tolSSIM  = 1e-10 // relative, SSIM and MS-SSIM
		tolPoint = 1e-12 // relative, PSNR, MSE, MAE
	)
	for _, c := range loadRefs(t) {
		t.Run(c.Name, func(t *testing.T) {
			x, y := genCase(c)
			if got := checksum(x.Data); got != c.ChecksumX {
				t.Fatalf("generated x differs from make_refs.py's: checksum %d, want %d", got, c.ChecksumX)
			}
			if got := checksum(y.Data); got != c.ChecksumY {
				t.Fatalf("generated y differs from make_refs.py's: checksum %d, want %d", got, c.ChecksumY)
			}
			checks := []struct {
				name string
				want float64
				tol  float64
				f    func() (float64, error)
			}{
				{"PSNR", c.PSNR, tolPoint, func() (float64, error) { return PSNR(x.Data, y.Data, c.DataRange) }},
				{"MSE", c.MSE, tolPoint, func() (float64, error) { return MSE(x.Data, y.Data) }},
				{"MAE", c.MAE, tolPoint, func() (float64, error) { return MAE(x.Data, y.Data) }},
				{"SSIM gaussian", c.Gaussian, tolSSIM, func() (float64, error) { return SSIM(x, y, GaussianOptions(c.DataRange)) }},
				{"SSIM uniform", c.Uniform, tolSSIM, func() (float64, error) { return SSIM(x, y, UniformOptions(c.DataRange)) }},
				{"SSIM uniform population", c.UniformPop, tolSSIM, func() (float64, error) {
					return SSIM(x, y, SSIMOptions{DataRange: c.DataRange, Window: Uniform})
				}},
				{"MSSSIM", c.MSSSIM, tolSSIM, func() (float64, error) { return MSSSIM(x, y, c.DataRange) }},
			}
			for _, ch := range checks {
				got, err := ch.f()
				if math.IsNaN(ch.want) {
					// No reference: scikit-image refuses the case (window
					// larger than the image) or it is too small for MS-SSIM.
					if err == nil {
						t.Errorf("%s = %v, want an error", ch.name, got)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", ch.name, err)
					continue
				}
				if e := relErr(got, ch.want); e > ch.tol {
					t.Errorf("%s = %.17g, want %.17g (relative error %.2g > %.0g)", ch.name, got, ch.want, e, ch.tol)
				} else {
					t.Logf("%s = %.17g, relative error %.2g", ch.name, got, e)
				}
			}
			if !math.IsNaN(c.GaussianF32) {
				got, _ := SSIM(x, y, GaussianOptions(c.DataRange))
				t.Logf("scikit-image on the float32 arrays (float32 filtering) is off by %.2g", relErr(c.GaussianF32, got))
			}
		})
	}
}
