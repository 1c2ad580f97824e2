package metrics

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// Window selects the weighting window of SSIM's local statistics.
type Window int

const (
	// Gaussian weights the window with a Gaussian of standard deviation
	// SSIMOptions.Sigma truncated at 3.5σ, i.e. radius int(3.5σ+0.5): 11
	// samples per axis for the default σ = 1.5 (scikit-image's
	// gaussian_weights=True, and torchmetrics' default).
	Gaussian Window = iota
	// Uniform weights a box of SSIMOptions.WinSize samples per axis equally
	// (scikit-image's default window).
	Uniform
)

// Default SSIM parameters, those of Wang et al. (2004) and scikit-image.
const (
	DefaultSigma   = 1.5
	DefaultWinSize = 7
	DefaultK1      = 0.01
	DefaultK2      = 0.03
)

// SSIMOptions configures SSIM. Zero-valued fields other than DataRange take
// their defaults.
//
// To match scikit-image's structural_similarity(x, y, data_range=R, ...):
//   - gaussian_weights=True, use_sample_covariance=False (the setting of
//     Wang et al. and of most papers): GaussianOptions(R);
//   - the function's defaults (uniform 7-sample window,
//     use_sample_covariance=True): UniformOptions(R).
type SSIMOptions struct {
	// DataRange is the extent of the possible values (max - min, e.g. 1 for
	// images in [0, 1], 4095 for 12-bit CT). It must be positive; there is
	// no default, because guessing it from the data changes the result.
	DataRange float64
	// Window is Gaussian (the zero value) or Uniform.
	Window Window
	// Sigma is the Gaussian window's standard deviation; 0 means 1.5.
	Sigma float64
	// WinSize is the Uniform window's side, odd and at least 3; 0 means 7.
	WinSize int
	// K1 and K2 set C1 = (K1·DataRange)² and C2 = (K2·DataRange)²; 0 means
	// 0.01 and 0.03.
	K1, K2 float64
	// SampleCovariance scales the local (co)variances by NP/(NP-1), NP the
	// number of samples in the window (scikit-image's
	// use_sample_covariance=True); false uses the population (co)variances.
	SampleCovariance bool
}

// GaussianWindow is the side of GaussianOptions' window: 2·⌊3.5σ + ½⌋ + 1
// for σ = 1.5, as scikit-image truncates it.
const GaussianWindow = 11

// GaussianOptions returns the options of scikit-image's
// structural_similarity(x, y, data_range=dataRange, gaussian_weights=True,
// sigma=1.5, use_sample_covariance=False): an 11-sample Gaussian window,
// K1 = 0.01, K2 = 0.03.
func GaussianOptions(dataRange float64) SSIMOptions {
	return SSIMOptions{DataRange: dataRange}
}

// UniformOptions returns the options of scikit-image's default
// structural_similarity(x, y, data_range=dataRange): a 7-sample uniform
// window with sample covariances, K1 = 0.01, K2 = 0.03.
func UniformOptions(dataRange float64) SSIMOptions {
	return SSIMOptions{DataRange: dataRange, Window: Uniform, SampleCovariance: true}
}

// ssimParams are resolved SSIMOptions.
type ssimParams struct {
	taps    []float64 // symmetric 1D window weights, odd length, summing to 1
	c1, c2  float64
	covNorm float64
	// clampVar clamps the local variances at 0 (torchmetrics does, scikit-image does not).
	clampVar bool
	// contrast makes ssimMean average the contrast-structure term
	// (2σxy+C2)/(σx²+σy²+C2) instead of SSIM.
	contrast bool
}

func (o SSIMOptions) params(ndim int) (ssimParams, error) {
	if err := checkDataRange(o.DataRange); err != nil {
		return ssimParams{}, err
	}
	k1, k2 := cmpOr(o.K1, DefaultK1), cmpOr(o.K2, DefaultK2)
	if !(k1 > 0 && k2 > 0) || math.IsInf(k1, 0) || math.IsInf(k2, 0) {
		return ssimParams{}, fmt.Errorf("metrics: SSIM K1 = %v, K2 = %v must be positive", o.K1, o.K2)
	}
	p := ssimParams{
		c1:      (k1 * o.DataRange) * (k1 * o.DataRange),
		c2:      (k2 * o.DataRange) * (k2 * o.DataRange),
		covNorm: 1,
	}
	switch o.Window {
	case Gaussian:
		sigma := cmpOr(o.Sigma, DefaultSigma)
		// The bound keeps the radius an int; a window that large fails the
		// size check anyway.
		if !(sigma > 0 && sigma < 1e6) {
			return ssimParams{}, fmt.Errorf("metrics: SSIM Sigma = %v must be positive (and below 1e6)", o.Sigma)
		}
		p.taps = gaussianTaps(sigma)
	case Uniform:
		n := o.WinSize
		if n == 0 {
			n = DefaultWinSize
		}
		if n < 3 || n%2 == 0 {
			return ssimParams{}, fmt.Errorf("metrics: SSIM WinSize = %d must be odd and at least 3", n)
		}
		p.taps = make([]float64, n)
		for i := range p.taps {
			p.taps[i] = 1 / float64(n)
		}
	default:
		return ssimParams{}, fmt.Errorf("metrics: unknown SSIM Window %d", o.Window)
	}
	if o.SampleCovariance {
		np := math.Pow(float64(len(p.taps)), float64(ndim))
		p.covNorm = np / (np - 1)
	}
	return p, nil
}

func cmpOr(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}

// gaussianTaps returns scipy.ndimage's normalized Gaussian kernel with
// truncate = 3.5: exp(-x²/2σ²) for x in [-r, r], r = int(3.5σ+0.5).
func gaussianTaps(sigma float64) []float64 {
	r := int(3.5*sigma + 0.5)
	taps := make([]float64, 2*r+1)
	var sum float64
	for i := range taps {
		x := float64(i - r)
		taps[i] = math.Exp(-0.5 / (sigma * sigma) * x * x)
		sum += taps[i]
	}
	for i := range taps {
		taps[i] /= sum
	}
	return taps
}

// checkWindow reports whether every filtered dimension of d holds the window.
func checkWindow(d [3]int, shape []int, win int, is3D bool) error {
	first := 1
	if is3D {
		first = 0
	}
	for _, n := range d[first:] {
		if n < win {
			return fmt.Errorf("metrics: SSIM window of %d samples exceeds shape %v; every dimension must be at least %d", win, shape, win)
		}
	}
	return nil
}

// SSIM returns the mean structural similarity of y against x, 2D (H×W) or 3D
// (D×H×W), equal to scikit-image's structural_similarity with the matching
// options (see SSIMOptions).
//
// The local means μ and (co)variances σ are the window-weighted averages of
// x, y, x², y², xy minus products of means; SSIM at a sample is
// ((2μxμy+C1)(2σxy+C2)) / ((μx²+μy²+C1)(σx²+σy²+C2)), and the result is its
// mean over the samples at least (win-1)/2 from every edge, as
// scikit-image's crop(S, pad).mean(). Those samples' windows lie inside the
// volume, so the filter's boundary mode does not affect the result and none
// is computed.
//
// Errors: shapes differ, a dimension smaller than the window, NaN or Inf in
// an input, invalid options (DataRange not positive, even WinSize, ...).
//
// SSIM filters separably, in bands of rows of one output slice spread over
// all CPUs; besides the inputs it needs 4·(len(taps)+2)·W float64 values per
// CPU (0.2 MB for 512 columns), whatever the depth.
func SSIM(x, y Volume, opt SSIMOptions) (float64, error) {
	d, err := pairDims(x, y)
	if err != nil {
		return 0, err
	}
	is3D := len(x.Shape) == 3
	p, err := opt.params(len(x.Shape))
	if err != nil {
		return 0, err
	}
	if err := checkWindow(d, x.Shape, len(p.taps), is3D); err != nil {
		return 0, err
	}
	return ssimMean(x.Data, y.Data, d, is3D, &p), nil
}

// ssimMean returns the mean of SSIM (or of the contrast-structure term if
// p.contrast) over the valid region of x and y, the samples whose window lies
// inside the volume. d is D×H×W with D = 1 for 2D; if is3D, D is filtered
// too. Every filtered dimension must be at least len(p.taps).
//
// SSIM needs only four filtered quantities: x, y, x²+y² and xy (σx²+σy² =
// f(x²+y²) - μx² - μy²). The work is split into bands of output rows of one
// output slice, handed to the goroutines one at a time, so no goroutine
// waits for another until the end. A band streams through its input rows:
// each row is filtered along D straight from the inputs into a ring of the
// last len(taps) rows, from which each output row is filtered along H, then
// W, and reduced to a sum of SSIM; everything a band touches besides the
// inputs stays in the CPU's cache. The row sums go into exact sums, so the
// result does not depend on how bands are spread over goroutines. Working
// memory: 4·(len(taps)+2)·W float64 per goroutine (0.2 MB for 512 columns),
// whatever the depth.
func ssimMean[T float32 | float64](x, y []T, d [3]int, is3D bool, p *ssimParams) float64 {
	taps, ztaps := p.taps, []float64{1}
	if is3D {
		ztaps = taps
	}
	D, H, W := d[0], d[1], d[2]
	Do, Ho, Wo := D-len(ztaps)+1, H-len(taps)+1, W-len(taps)+1
	// Whole slices are the cheapest bands (a band of n rows filters n+2r
	// along D); slices are cut in bands only when there are too few of them
	// to keep every goroutine busy to the end, e.g. in 2D.
	workers := runtime.GOMAXPROCS(0)
	bands := min(max(1, (4*workers+Do-1)/Do), max(1, Ho/32))
	tasks := Do * bands
	workers = min(workers, tasks)
	sums := make([]exactSum, workers)
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			b := newSSIMBand(W, len(taps))
			var sum exactSum
			for {
				t := int(next.Add(1)) - 1
				if t >= tasks {
					break
				}
				z, k := t/bands, t%bands
				bandSum(b, &sum, x, y, d, z, Ho*k/bands, Ho*(k+1)/bands, ztaps, p)
			}
			sums[g] = sum
		})
	}
	wg.Wait()
	for g := 1; g < workers; g++ {
		sums[0].merge(&sums[g])
	}
	return sums[0].value() / float64(Do*Ho*Wo)
}

// ssimBand holds one goroutine's buffers for ssimMean.
type ssimBand struct {
	// ring holds, for each of the 4 quantities, the last len(taps) input
	// rows filtered along D; row i of quantity k starts at (i·4+k)·stride.
	// stride pads the rows so that rows read together are not 4 KiB apart
	// (with 512 columns they would otherwise all map to the same cache
	// sets).
	ring   []float64
	stride int
	yb     []float64 // one row filtered along D and H
	u      [4][]float64
	src    [][]float64
}

func newSSIMBand(W, ntaps int) *ssimBand {
	b := &ssimBand{stride: W + 8, yb: make([]float64, W), src: make([][]float64, ntaps)}
	b.ring = make([]float64, 4*ntaps*b.stride)
	for k := range b.u {
		b.u[k] = make([]float64, W-ntaps+1)
	}
	return b
}

// bandSum adds to sum the row sums of SSIM of output rows [lo, hi) of output
// slice z, with b's buffers.
func bandSum[T float32 | float64](b *ssimBand, sum *exactSum, x, y []T, d [3]int, z, lo, hi int, ztaps []float64, p *ssimParams) {
	taps := p.taps
	n, H, W := len(taps), d[1], d[2]
	for row := lo; row < hi+n-1; row++ {
		i := row % n
		var dst [4][]float64
		for k := range dst {
			dst[k] = b.ring[(i*4+k)*b.stride:][:W]
		}
		filterProducts(dst, x, y, (z*H+row)*W, H*W, ztaps)
		if row < lo+n-1 {
			continue
		}
		// Ring row (out+t)%n holds input row out+t.
		out := row - n + 1
		for k := range 4 {
			for t := range n {
				b.src[t] = b.ring[(((out+t)%n)*4+k)*b.stride:][:W]
			}
			if n == 11 {
				combine11(b.yb, b.src, taps)
				filterRow11(b.u[k], b.yb, taps)
				continue
			}
			combine(b.yb, b.src, taps)
			for t := range n {
				b.src[t] = b.yb[t:][:len(b.u[k])]
			}
			combine(b.u[k], b.src, taps)
		}
		sum.add(p.rowSum(b.u))
	}
}

// filterProducts sets dst to x, y, x²+y² and xy filtered with the symmetric
// taps along a line of rows: tap t reads the len(dst[0]) samples from
// off+t·stride. The squares are rounded before they are added (the float64
// conversions) so that a build fusing multiply-adds (GOAMD64=v3) still
// treats x and y alike and SSIM(x, y) = SSIM(y, x) exactly.
func filterProducts[T float32 | float64](dst [4][]float64, x, y []T, off, stride int, taps []float64) {
	n := len(dst[0])
	fx, fy, fs, fp := dst[0][:n], dst[1][:n], dst[2][:n], dst[3][:n]
	r := len(taps) / 2
	xc, yc, w := x[off+r*stride:][:n], y[off+r*stride:][:n], taps[r]
	for i := range n {
		a, b := float64(xc[i]), float64(yc[i])
		fx[i], fy[i], fs[i], fp[i] = w*a, w*b, w*(float64(a*a)+float64(b*b)), w*(a*b)
	}
	for t := r - 1; t >= 0; t-- {
		x1, y1 := x[off+t*stride:][:n], y[off+t*stride:][:n]
		x2, y2 := x[off+(2*r-t)*stride:][:n], y[off+(2*r-t)*stride:][:n]
		w := taps[t]
		for i := range n {
			a1, b1, a2, b2 := float64(x1[i]), float64(y1[i]), float64(x2[i]), float64(y2[i])
			fx[i] += w * (a1 + a2)
			fy[i] += w * (b1 + b2)
			fs[i] += w * ((float64(a1*a1) + float64(b1*b1)) + (float64(a2*a2) + float64(b2*b2)))
			fp[i] += w * (a1*b1 + a2*b2)
		}
	}
}

// combine sets dst[i] = Σ_t taps[t]·src[t][i] for a symmetric taps, pairing
// the taps at equal distance from the center, from the center outwards (as
// scipy.ndimage does for symmetric kernels).
func combine(dst []float64, src [][]float64, taps []float64) {
	r := len(taps) / 2
	c, w := src[r][:len(dst)], taps[r]
	for i := range dst {
		dst[i] = w * c[i]
	}
	for t := r - 1; t >= 0; t-- {
		a, b, w := src[t][:len(dst)], src[len(taps)-1-t][:len(dst)], taps[t]
		for i := range dst {
			dst[i] += w * (a[i] + b[i])
		}
	}
}

// combine11 is combine for 11 taps in one pass: the products and sums are
// those of combine, in the same order, but each output is summed in a
// register instead of being loaded and stored once per tap pair.
func combine11(dst []float64, src [][]float64, taps []float64) {
	n := len(dst)
	w0, w1, w2, w3, w4, w5 := taps[0], taps[1], taps[2], taps[3], taps[4], taps[5]
	s0, s1, s2, s3, s4, s5 := src[0][:n], src[1][:n], src[2][:n], src[3][:n], src[4][:n], src[5][:n]
	s6, s7, s8, s9, s10 := src[6][:n], src[7][:n], src[8][:n], src[9][:n], src[10][:n]
	for i := range dst {
		v := w5 * s5[i]
		v += w4 * (s4[i] + s6[i])
		v += w3 * (s3[i] + s7[i])
		v += w2 * (s2[i] + s8[i])
		v += w1 * (s1[i] + s9[i])
		v += w0 * (s0[i] + s10[i])
		dst[i] = v
	}
}

// filterRow11 is combine for 11 taps with src[t] = row[t:]: the filter along
// a row, in one pass and in combine's order.
func filterRow11(dst, row []float64, taps []float64) {
	w0, w1, w2, w3, w4, w5 := taps[0], taps[1], taps[2], taps[3], taps[4], taps[5]
	row = row[:len(dst)+10]
	for i := range dst {
		s := row[i : i+11 : i+11]
		v := w5 * s[5]
		v += w4 * (s[4] + s[6])
		v += w3 * (s[3] + s[7])
		v += w2 * (s[2] + s[8])
		v += w1 * (s[1] + s[9])
		v += w0 * (s[0] + s[10])
		dst[i] = v
	}
}

// rowSum returns the sum over one row of SSIM (or the contrast-structure
// term) from the filtered x, y, x²+y², xy in u. The operations follow
// scikit-image's, except that σx²+σy² comes from one filtered quantity; the
// clamp at 0 (torchmetrics) applies to that sum. For x = y every term is
// exactly 1.
func (p *ssimParams) rowSum(u [4][]float64) float64 {
	ux := u[0]
	uy, us, up := u[1][:len(ux)], u[2][:len(ux)], u[3][:len(ux)]
	var s float64
	for i := range ux {
		sq := float64(ux[i]*ux[i]) + float64(uy[i]*uy[i]) // rounded as in filterProducts
		vsum := p.covNorm * (us[i] - sq)
		vxy := p.covNorm * (up[i] - ux[i]*uy[i])
		if p.clampVar {
			vsum = max(vsum, 0)
		}
		a2 := 2*vxy + p.c2
		b2 := vsum + p.c2
		if p.contrast {
			s += a2 / b2
			continue
		}
		a1 := 2*ux[i]*uy[i] + p.c1
		b1 := sq + p.c1
		s += (a1 * a2) / (b1 * b2)
	}
	return s
}
