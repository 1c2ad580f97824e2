package metrics

import (
	"math"
	"math/big"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// TestExactSum checks that exactSum is exact and order-independent against
// math/big, including cancellation, subnormals and values near the float64
// limits.
func TestExactSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]float64, 1000)
	for i := range random {
		random[i] = (rng.Float64() - 0.5) * math.Pow(2, float64(rng.IntN(200)-100))
	}
	tests := []struct {
		name string
		vals []float64
	}{
		{"cancellation", []float64{1e100, 1, -1e100}},
		{"negative", []float64{-3.5, 1.25, -0.125}},
		{"subnormals", []float64{math.SmallestNonzeroFloat64, 3 * math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64}},
		{"huge", []float64{math.MaxFloat64, math.MaxFloat64, -math.MaxFloat64}},
		{"overflow", []float64{math.MaxFloat64, math.MaxFloat64}},
		{"tiny and large", []float64{1, 0x1p-60, 0x1p-60, -1}},
		{"random", random},
		{"empty", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := new(big.Float).SetPrec(4000)
			for _, v := range tc.vals {
				want.Add(want, new(big.Float).SetFloat64(v))
			}
			wantF, _ := want.Float64()
			var fwd, rev, split exactSum
			for _, v := range tc.vals {
				fwd.add(v)
			}
			for i := len(tc.vals) - 1; i >= 0; i-- {
				rev.add(tc.vals[i])
			}
			var a, b exactSum
			for i, v := range tc.vals {
				if i%3 == 0 {
					a.add(v)
				} else {
					b.add(v)
				}
			}
			split.merge(&b)
			split.merge(&a)
			for name, s := range map[string]*exactSum{"forward": &fwd, "reverse": &rev, "split and merged": &split} {
				if got := s.value(); got != wantF {
					t.Errorf("%s sum = %v, want %v", name, got, wantF)
				}
			}
		})
	}
}

// TestPointwiseHand checks PSNR, MSE and MAE on values small enough to work
// out by hand.
func TestPointwiseHand(t *testing.T) {
	x := []float32{0, 0.5, 1, 0.25}
	y := []float32{0, 0.25, 0.5, 0.5}
	// Differences 0, 0.25, 0.5, -0.25: MSE = 0.375/4, MAE = 1/4.
	mse, mae := 0.375/4, 0.25
	tests := []struct {
		name string
		f    func() (float64, error)
		want float64
	}{
		{"MSE", func() (float64, error) { return MSE(x, y) }, mse},
		{"MAE", func() (float64, error) { return MAE(x, y) }, mae},
		{"PSNR range 1", func() (float64, error) { return PSNR(x, y, 1) }, 10 * math.Log10(1/mse)},
		{"PSNR range 255", func() (float64, error) { return PSNR(x, y, 255) }, 10 * math.Log10(255*255/mse)},
		{"PSNR identical", func() (float64, error) { return PSNR(x, x, 1) }, math.Inf(1)},
		{"MSE identical", func() (float64, error) { return MSE(x, x) }, 0},
	}
	for _, tc := range tests {
		got, err := tc.f()
		if err != nil || got != tc.want {
			t.Errorf("%s = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

// TestAccumulatorOrder checks that ErrorAccumulator and Mean give bitwise the
// same values however the data are split into batches and merged, and that
// a failed Add leaves the accumulator unchanged.
func TestAccumulatorOrder(t *testing.T) {
	c := refCase{Kind: "noise", Shape: []int{100003}, Seed: 11, Amp: 0.3, Gain: 1, Scale: 1}
	x, y := genCase(c)
	var whole ErrorAccumulator
	if err := whole.Add(x.Data, y.Data); err != nil {
		t.Fatal(err)
	}
	// Batches of 30000 at block boundaries other than the whole's, added to
	// two workers in an interleaved order, then merged in reverse.
	var w1, w2 ErrorAccumulator
	for i, lo := 0, 0; lo < len(x.Data); i, lo = i+1, lo+30000 {
		hi := min(lo+30000, len(x.Data))
		acc := &w1
		if i%2 == 1 {
			acc = &w2
		}
		if err := acc.Add(x.Data[lo:hi], y.Data[lo:hi]); err != nil {
			t.Fatal(err)
		}
	}
	bad := append([]float32(nil), y.Data[:10]...)
	bad[7] = float32(math.NaN())
	if err := w2.Add(x.Data[:10], bad); err == nil || !strings.Contains(err.Error(), "y[7]") {
		t.Errorf("Add with NaN at y[7]: error %v, want one naming y[7]", err)
	}
	w2.Merge(&w1)
	if whole.Count() != w2.Count() {
		t.Fatalf("Count = %d after merging, want %d", w2.Count(), whole.Count())
	}
	for _, f := range []func(*ErrorAccumulator) (float64, error){
		(*ErrorAccumulator).MSE, (*ErrorAccumulator).MAE,
		func(a *ErrorAccumulator) (float64, error) { return a.PSNR(1) },
	} {
		a, _ := f(&whole)
		b, _ := f(&w2)
		// The block sums differ, so agreement is to rounding, not bitwise.
		if relErr(b, a) > 1e-14 {
			t.Errorf("batched value %v differs from whole %v", b, a)
		}
	}
	// Per-volume PSNR in a Mean: any order of Add and Merge is bitwise equal.
	vals := []float64{28.1, 29.7, 30.25, 27.9, 1e-9, 31}
	var m1, m2, m3 Mean
	for i, v := range vals {
		m1.Add(v)
		if i < 3 {
			m2.Add(vals[len(vals)-1-i])
		} else {
			m3.Add(vals[len(vals)-1-i])
		}
	}
	m3.Merge(&m2)
	a, _ := m1.Value()
	b, _ := m3.Value()
	if a != b || m3.Count() != int64(len(vals)) {
		t.Errorf("Mean = %v (count %d) after merging, want %v (count %d)", b, m3.Count(), a, len(vals))
	}
	if err := m1.Add(math.Inf(1)); err == nil {
		t.Error("Mean.Add(+Inf) succeeded, want an error")
	}
}

// TestSSIMDeterministic checks that SSIM and PSNR do not depend on the
// number of CPUs, bit for bit. The 2D image is cut into 4 bands of rows with
// 1 CPU and 5 with more, the volume into whole slices.
func TestSSIMDeterministic(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, shape := range [][]int{{23, 31, 29}, {200, 190}} {
		x, y := genCase(refCase{Kind: "smooth", Shape: shape, Seed: 3, Amp: 0.1, Gain: 0.9, Scale: 1})
		var want [2]float64
		for _, procs := range []int{1, 2, 3, 7} {
			runtime.GOMAXPROCS(procs)
			s, err := SSIM(x, y, GaussianOptions(1))
			if err != nil {
				t.Fatal(err)
			}
			p, err := PSNR(x.Data, y.Data, 1)
			if err != nil {
				t.Fatal(err)
			}
			if procs == 1 {
				want = [2]float64{s, p}
			} else if [2]float64{s, p} != want {
				t.Errorf("%v, GOMAXPROCS %d: SSIM, PSNR = %v, %v; with 1 CPU %v, %v", shape, procs, s, p, want[0], want[1])
			}
		}
	}
}

// TestSSIMExact checks properties that hold exactly: SSIM and MS-SSIM of an
// input with itself are 1, SSIM is symmetric, MS-SSIM of constant images is
// the luminance term at the coarsest scale, and MS-SSIM of anti-correlated
// images is 0 (a negative contrast-structure mean is clamped by relu).
func TestSSIMExact(t *testing.T) {
	x, y := genCase(refCase{Kind: "smooth", Shape: []int{180, 177}, Seed: 5, Amp: 0.2, Gain: 0.9, Scale: 1})
	x3, _ := genCase(refCase{Kind: "noise", Shape: []int{12, 15, 11}, Seed: 6, Amp: 0.2, Gain: 1, Scale: 1})
	for _, tc := range []struct {
		name string
		x    Volume
		opt  SSIMOptions
	}{
		{"2D gaussian", x, GaussianOptions(1)},
		{"2D uniform", x, UniformOptions(1)},
		{"3D gaussian", x3, GaussianOptions(2)},
		{"3D uniform population", x3, SSIMOptions{DataRange: 1, Window: Uniform, WinSize: 5}},
	} {
		if got, err := SSIM(tc.x, tc.x, tc.opt); got != 1 || err != nil {
			t.Errorf("%s: SSIM(x, x) = %v, %v; want exactly 1", tc.name, got, err)
		}
	}
	if got, err := MSSSIM(x, x, 1); got != 1 || err != nil {
		t.Errorf("MSSSIM(x, x) = %v, %v; want exactly 1", got, err)
	}
	a, _ := SSIM(x, y, GaussianOptions(1))
	b, _ := SSIM(y, x, GaussianOptions(1))
	if a != b {
		t.Errorf("SSIM(x, y) = %v but SSIM(y, x) = %v", a, b)
	}

	const ca, cb = 0.2, 0.6
	cx, cy := Volume{make([]float32, 176*190), []int{176, 190}}, Volume{make([]float32, 176*190), []int{176, 190}}
	for i := range cx.Data {
		cx.Data[i], cy.Data[i] = ca, cb
	}
	c1 := 0.01 * 0.01
	a32, b32 := float64(float32(ca)), float64(float32(cb))
	want := math.Pow((2*a32*b32+c1)/(a32*a32+b32*b32+c1), 0.1333)
	if got, err := MSSSIM(cx, cy, 1); err != nil || relErr(got, want) > 1e-12 {
		t.Errorf("MSSSIM of constants %v, %v = %v, %v; want %v", ca, cb, got, err, want)
	}

	noise, _ := genCase(refCase{Kind: "noise", Shape: []int{180, 177}, Seed: 7, Scale: 1})
	neg := Volume{make([]float32, len(noise.Data)), noise.Shape}
	for i, v := range noise.Data {
		neg.Data[i] = 1 - v
	}
	if got, err := MSSSIM(noise, neg, 1); got != 0 || err != nil {
		t.Errorf("MSSSIM(n, 1-n) for noise n = %v, %v; want 0", got, err)
	}
}

// TestBadInputs checks that invalid inputs give a descriptive error and no
// number.
func TestBadInputs(t *testing.T) {
	v := func(shape ...int) Volume {
		n := 1
		for _, s := range shape {
			n *= s
		}
		d := make([]float32, max(n, 0))
		for i := range d {
			d[i] = float32(i%5) / 4
		}
		return Volume{d, shape}
	}
	withNaN, withInf := v(12, 12), v(12, 12)
	withNaN.Data[17] = float32(math.NaN())
	withInf.Data[5] = float32(math.Inf(-1))
	ok2, ok3 := v(12, 12), v(12, 12, 12)
	g := GaussianOptions(1)
	tests := []struct {
		name string
		f    func() (float64, error)
		want string // a substring of the error
	}{
		{"SSIM shapes differ", func() (float64, error) { return SSIM(ok2, v(12, 13), g) }, "x is [12 12], y is [12 13]"},
		{"SSIM 2D vs 3D", func() (float64, error) { return SSIM(ok3, v(12, 144), g) }, "x is [12 12 12], y is [12 144]"},
		{"SSIM data too short", func() (float64, error) { return SSIM(Volume{ok2.Data[:10], ok2.Shape}, ok2, g) }, "x has shape [12 12] (144 elements) but 10 values"},
		{"SSIM data mismatch", func() (float64, error) {
			return SSIM(Volume{ok2.Data[:10], []int{12, 12}}, Volume{ok2.Data[:10], []int{12, 12}}, g)
		}, "but 10 values"},
		{"SSIM 1D", func() (float64, error) { return SSIM(v(144), v(144), g) }, "want 2"},
		{"SSIM 4D", func() (float64, error) { return SSIM(v(2, 12, 12, 12), v(2, 12, 12, 12), g) }, "want 2"},
		{"SSIM negative dim", func() (float64, error) { return SSIM(v(-12, -12), v(-12, -12), g) }, "invalid shape"},
		{"SSIM gaussian too small", func() (float64, error) { return SSIM(v(10, 40), v(10, 40), g) }, "at least 11"},
		{"SSIM 3D depth too small", func() (float64, error) { return SSIM(v(10, 12, 12), v(10, 12, 12), g) }, "at least 11"},
		{"SSIM uniform too small", func() (float64, error) { return SSIM(v(6, 40), v(6, 40), UniformOptions(1)) }, "at least 7"},
		{"SSIM NaN", func() (float64, error) { return SSIM(ok2, withNaN, g) }, "y[17] is NaN"},
		{"SSIM Inf", func() (float64, error) { return SSIM(withInf, ok2, g) }, "x[5] is -Inf"},
		{"SSIM zero range", func() (float64, error) { return SSIM(ok2, ok2, GaussianOptions(0)) }, "data range"},
		{"SSIM negative range", func() (float64, error) { return SSIM(ok2, ok2, GaussianOptions(-1)) }, "data range"},
		{"SSIM NaN range", func() (float64, error) { return SSIM(ok2, ok2, GaussianOptions(math.NaN())) }, "data range"},
		{"SSIM even window", func() (float64, error) {
			return SSIM(ok2, ok2, SSIMOptions{DataRange: 1, Window: Uniform, WinSize: 6})
		}, "odd"},
		{"SSIM negative K1", func() (float64, error) { return SSIM(ok2, ok2, SSIMOptions{DataRange: 1, K1: -1}) }, "K1"},
		{"SSIM negative sigma", func() (float64, error) { return SSIM(ok2, ok2, SSIMOptions{DataRange: 1, Sigma: -1}) }, "Sigma"},
		{"SSIM unknown window", func() (float64, error) { return SSIM(ok2, ok2, SSIMOptions{DataRange: 1, Window: 7}) }, "Window"},
		{"MSSSIM too small", func() (float64, error) { return MSSSIM(v(40, 48, 36), v(40, 48, 36), 1) }, "at least 176"},
		{"MSSSIM one dim too small", func() (float64, error) { return MSSSIM(v(176, 175), v(176, 175), 1) }, "got shape [176 175]"},
		{"MSSSIM shapes differ", func() (float64, error) { return MSSSIM(v(176, 176), v(176, 177), 1) }, "x is [176 176], y is [176 177]"},
		{"MSSSIM zero range", func() (float64, error) { return MSSSIM(v(176, 176), v(176, 176), 0) }, "data range"},
		{"PSNR lengths differ", func() (float64, error) { return PSNR(ok2.Data, ok2.Data[1:], 1) }, "x has 144 values, y has 143"},
		{"PSNR empty", func() (float64, error) { return PSNR(nil, nil, 1) }, "no values"},
		{"PSNR NaN", func() (float64, error) { return PSNR(withNaN.Data, ok2.Data, 1) }, "x[17] is NaN"},
		{"PSNR Inf range", func() (float64, error) { return PSNR(ok2.Data, ok2.Data, math.Inf(1)) }, "data range"},
		{"MSE Inf", func() (float64, error) { return MSE(ok2.Data, withInf.Data) }, "y[5] is -Inf"},
		{"MAE lengths differ", func() (float64, error) { return MAE(ok2.Data[:3], ok2.Data) }, "lengths differ"},
		{"Mean empty", func() (float64, error) { var m Mean; return m.Value() }, "no values"},
	}
	for _, tc := range tests {
		got, err := tc.f()
		if err == nil {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, got, tc.want)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q, want it to contain %q", tc.name, err, tc.want)
		}
	}
}

// TestPerplexity checks perplexity and bits per token on hand-computed
// cases, merging, and the rejection of invalid batches.
// TestFirstNonFinite checks the blockwise scan: the first NaN or Inf is
// found at and across block edges, and the largest finite values and the
// subnormals are not taken for one.
func TestFirstNonFinite(t *testing.T) {
	v := make([]float32, 10000)
	v[3], v[4], v[5] = math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32
	if i := firstNonFinite(v); i != -1 {
		t.Fatalf("finite values: first non-finite at %d", i)
	}
	for _, at := range []int{0, 17, 4095, 4096, 9999} {
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			v[at], v[9999] = bad, bad
			if i := firstNonFinite(v); i != at {
				t.Errorf("%v at %d (and 9999): found at %d", bad, at, i)
			}
			v[at], v[9999] = 0, 0
		}
	}
}

func TestPerplexity(t *testing.T) {
	type batch struct {
		nll    float64
		tokens int64
	}
	tests := []struct {
		name       string
		batches    []batch
		ppl, bits  float64
		meanNLLTol float64
	}{
		// Every token has p = 1/2: NLL ln 2 each, perplexity 2, 1 bit.
		{"coin", []batch{{4 * math.Ln2, 4}}, 2, 1, 0},
		// Uniform over a 50257-token vocabulary, in three uneven batches.
		{"uniform vocab", []batch{{7 * math.Log(50257), 7}, {0, 0}, {3 * math.Log(50257), 3}}, 50257, math.Log2(50257), 0},
		// Mean NLL (ln 2 + ln 8)/2 = 2 ln 2: perplexity 4, 2 bits.
		{"two batches", []batch{{math.Ln2, 1}, {3 * math.Ln2, 1}}, 4, 2, 0},
		// All tokens certain: perplexity 1, 0 bits.
		{"certain", []batch{{0, 1000}}, 1, 0, 0},
	}
	for _, tc := range tests {
		var fwd, rev, merged Perplexity
		for i, b := range tc.batches {
			if err := fwd.Add(b.nll, b.tokens); err != nil {
				t.Fatal(err)
			}
			r := tc.batches[len(tc.batches)-1-i]
			var one Perplexity
			if err := one.Add(r.nll, r.tokens); err != nil {
				t.Fatal(err)
			}
			rev.Merge(&one)
		}
		merged.Merge(&rev)
		for name, p := range map[string]*Perplexity{"forward": &fwd, "reverse merged": &merged} {
			ppl, err1 := p.Value()
			bits, err2 := p.BitsPerToken()
			if err1 != nil || err2 != nil || relErr(ppl, tc.ppl) > 1e-15 || math.Abs(bits-tc.bits) > 1e-15*math.Max(1, tc.bits) {
				t.Errorf("%s %s: perplexity %v (%v), bits %v (%v); want %v, %v", tc.name, name, ppl, err1, bits, err2, tc.ppl, tc.bits)
			}
		}
	}

	var p Perplexity
	if _, err := p.Value(); err == nil {
		t.Error("Value with no tokens: no error")
	}
	for _, b := range []batch{{math.NaN(), 3}, {math.Inf(1), 3}, {1, -1}, {1, 0}, {-2, 10}} {
		if err := p.Add(b.nll, b.tokens); err == nil {
			t.Errorf("Add(%v, %d) succeeded, want an error", b.nll, b.tokens)
		}
	}
	if p.Tokens() != 0 {
		t.Errorf("failed Adds changed Tokens to %d", p.Tokens())
	}
	if err := p.Add(-1e-9, 10); err != nil {
		t.Errorf("Add(-1e-9, 10), rounding noise: %v", err)
	}
}

// TestTopK checks top-k accuracy on hand-made logits, including ties, which
// go to the lower class index.
func TestTopK(t *testing.T) {
	inf := float32(math.Inf(1))
	tests := []struct {
		name    string
		classes int
		logits  []float32
		labels  []int64
		want    map[int]float64 // k → accuracy
	}{
		{"clear ranks", 4, []float32{
			0.1, 0.7, 0.2, 0.0, // label 1: rank 0
			0.1, 0.7, 0.2, 0.0, // label 2: rank 1
			0.1, 0.7, 0.2, 0.0, // label 3: rank 3
		}, []int64{1, 2, 3}, map[int]float64{1: 1.0 / 3, 2: 2.0 / 3, 3: 2.0 / 3, 4: 1, 10: 1}},
		{"ties go to the lower index", 5, []float32{
			1, 1, 1, 0, 0, // label 0: rank 0
			1, 1, 1, 0, 0, // label 2: rank 2 (classes 0 and 1 tie and come first)
			0, 0, 0, 0, 0, // label 4: rank 4
		}, []int64{0, 2, 4}, map[int]float64{1: 1.0 / 3, 2: 1.0 / 3, 3: 2.0 / 3, 5: 1}},
		{"infinities", 3, []float32{-inf, inf, 0, inf, inf, -inf}, []int64{2, 1}, map[int]float64{1: 0, 2: 1}},
		{"more than TopKMax classes", 12, []float32{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, []int64{11}, map[int]float64{10: 0}},
	}
	for _, tc := range tests {
		var all, merged TopK
		if err := all.Add(tc.logits, tc.classes, tc.labels); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		// One sample at a time, merged in reverse order.
		for i := len(tc.labels) - 1; i >= 0; i-- {
			var one TopK
			if err := one.Add(tc.logits[i*tc.classes:(i+1)*tc.classes], tc.classes, tc.labels[i:i+1]); err != nil {
				t.Fatal(err)
			}
			merged.Merge(&one)
		}
		for k, want := range tc.want {
			a, err1 := all.Accuracy(k)
			m, err2 := merged.Accuracy(k)
			if err1 != nil || err2 != nil || a != want || m != want {
				t.Errorf("%s: top-%d = %v (%v), merged %v (%v); want %v", tc.name, k, a, err1, m, err2, want)
			}
		}
	}

	var tk TopK
	bad := []struct {
		name    string
		logits  []float32
		classes int
		labels  []int64
	}{
		{"no classes", nil, 0, nil},
		{"size mismatch", []float32{1, 2, 3}, 2, []int64{0, 1}},
		{"label too large", []float32{1, 2}, 2, []int64{2}},
		{"negative label", []float32{1, 2}, 2, []int64{-1}},
		{"NaN", []float32{1, 2, float32(math.NaN()), 0}, 2, []int64{0, 0}},
	}
	for _, b := range bad {
		if err := tk.Add(b.logits, b.classes, b.labels); err == nil {
			t.Errorf("Add %s succeeded, want an error", b.name)
		}
	}
	if tk.Count() != 0 {
		t.Errorf("failed Adds changed Count to %d", tk.Count())
	}
	for _, k := range []int{0, TopKMax + 1} {
		if _, err := tk.Accuracy(k); err == nil {
			t.Errorf("Accuracy(%d) succeeded, want an error", k)
		}
	}
}

// TestGaussianWindow: the constant callers check volume sizes against is
// the window GaussianOptions filters with.
func TestGaussianWindow(t *testing.T) {
	if n := len(gaussianTaps(1.5)); n != GaussianWindow {
		t.Errorf("the Gaussian window has %d taps, GaussianWindow says %d", n, GaussianWindow)
	}
}
