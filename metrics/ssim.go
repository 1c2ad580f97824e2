package metrics

import (
	"fmt"
	"math"
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
// SSIM filters separably, one output slice at a time, spreading rows over
// all CPUs; besides the inputs it needs 4·H·W float64 values (8 MB for
// 512×512 slices), whatever the depth.
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
// f(x²+y²) - μx² - μy²). For each output slice, the four are filtered along D
// straight from the inputs into zb (H×W each), then each output row is
// filtered along H and W in per-goroutine buffers and reduced to a sum of
// SSIM. The row sums go into an exact sum, so the result does not depend on
// how rows are spread over goroutines. Working memory: 4·H·W float64 plus a
// few rows per goroutine (8 MB for 512×512 slices), whatever the depth.
func ssimMean[T float32 | float64](x, y []T, d [3]int, is3D bool, p *ssimParams) float64 {
	taps, ztaps := p.taps, []float64{1}
	if is3D {
		ztaps = taps
	}
	r := len(taps) / 2
	D, H, W := d[0], d[1], d[2]
	Do, Ho, Wo := D-len(ztaps)+1, H-2*r, W-2*r
	// Rows and planes of zb are padded so that they are not 4 KiB apart:
	// with 512×512 slices the rows read together would otherwise all map to
	// the same cache sets.
	ws := W + 8
	qs := H*ws + 16
	zb := make([]float64, 4*qs)
	rowSums := make([]float64, Ho)
	var total exactSum
	for z := range Do {
		parallelFor(H, func(lo, hi int) {
			for row := lo; row < hi; row++ {
				var dst [4][]float64
				for k := range dst {
					dst[k] = zb[k*qs+row*ws:][:W]
				}
				filterProducts(dst, x, y, (z*H+row)*W, H*W, ztaps)
			}
		})
		parallelFor(Ho, func(lo, hi int) {
			yb := make([]float64, 4*W)
			var u [4][]float64
			for k := range u {
				u[k] = make([]float64, Wo)
			}
			src := make([][]float64, len(taps))
			for row := lo; row < hi; row++ {
				for k := range 4 {
					for t := range taps {
						src[t] = zb[k*qs+(row+t)*ws:][:W]
					}
					combine(yb[k*W:][:W], src, taps)
					for t := range taps {
						src[t] = yb[k*W+t:][:Wo]
					}
					combine(u[k], src, taps)
				}
				rowSums[row] = p.rowSum(u)
			}
		})
		for _, s := range rowSums {
			total.add(s)
		}
	}
	return total.value() / float64(Do*Ho*Wo)
}

// filterProducts sets dst to x, y, x²+y² and xy filtered with the symmetric
// taps along a line of rows: tap t reads the len(dst[0]) samples from
// off+t·stride.
func filterProducts[T float32 | float64](dst [4][]float64, x, y []T, off, stride int, taps []float64) {
	n := len(dst[0])
	fx, fy, fs, fp := dst[0][:n], dst[1][:n], dst[2][:n], dst[3][:n]
	r := len(taps) / 2
	xc, yc, w := x[off+r*stride:][:n], y[off+r*stride:][:n], taps[r]
	for i := range n {
		a, b := float64(xc[i]), float64(yc[i])
		fx[i], fy[i], fs[i], fp[i] = w*a, w*b, w*(a*a+b*b), w*(a*b)
	}
	for t := r - 1; t >= 0; t-- {
		x1, y1 := x[off+t*stride:][:n], y[off+t*stride:][:n]
		x2, y2 := x[off+(2*r-t)*stride:][:n], y[off+(2*r-t)*stride:][:n]
		w := taps[t]
		for i := range n {
			a1, b1, a2, b2 := float64(x1[i]), float64(y1[i]), float64(x2[i]), float64(y2[i])
			fx[i] += w * (a1 + a2)
			fy[i] += w * (b1 + b2)
			fs[i] += w * ((a1*a1 + b1*b1) + (a2*a2 + b2*b2))
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
		sq := ux[i]*ux[i] + uy[i]*uy[i]
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
