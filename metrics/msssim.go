package metrics

import (
	"fmt"
	"math"
)

// msssimBetas are the exponents of the five scales (Wang, Simoncelli & Bovik
// 2003), finest first, as in torchmetrics.
var msssimBetas = [...]float64{0.0448, 0.2856, 0.3001, 0.2363, 0.1333}

// MSSSIMMinSize is the smallest extent MSSSIM accepts in every dimension:
// after four halvings the coarsest scale must still hold the 11-sample
// window (176/16 = 11).
const MSSSIMMinSize = 11 << (len(msssimBetas) - 1)

// MSSSIM returns the multi-scale structural similarity of y against x, 2D
// (H×W) or 3D (D×H×W), following torchmetrics (>= 1.5)
// multiscale_structural_similarity_index_measure(x, y, data_range=dataRange)
// with its defaults:
//
//	MS-SSIM = relu(cs₀)^β₀ · relu(cs₁)^β₁ · relu(cs₂)^β₂ · relu(cs₃)^β₃ · relu(ssim₄)^β₄
//	β = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)
//
// Scale 0 is the input; scale s+1 is scale s average-pooled by 2 along every
// dimension (an odd last sample is dropped, as torch's avg_pool). Local
// statistics use the 11-sample Gaussian window (σ = 1.5), K1 = 0.01,
// K2 = 0.03, population (co)variances with the variances clamped at 0.
//
//   - csₛ is the mean over the valid region (samples at least 5 from every
//     edge, as in SSIM) of the contrast-structure term (2σxy+C2)/(σx²+σy²+C2).
//   - ssim₄ is the mean SSIM over the whole coarsest scale, its windows
//     completed by mirroring without repeating the edge sample (torch's
//     "reflect" padding, scipy's "mirror").
//   - relu(v) = max(v, 0): a negative mean term makes MS-SSIM 0.
//
// torchmetrics before 1.5 averaged ssim₄ over the valid region only; on
// natural images the two differ in the third or fourth decimal.
//
// Every dimension must be at least MSSSIMMinSize (176) so the coarsest scale
// holds the window; smaller inputs are an error, as are mismatched shapes,
// NaN or Inf inputs and a non-positive dataRange. Besides the inputs, MSSSIM
// needs float64 copies of the coarser scales, 2/7 of the input's float32 size
// in 3D (2/3 in 2D), and the working memory of SSIM.
func MSSSIM(x, y Volume, dataRange float64) (float64, error) {
	d, err := pairDims(x, y)
	if err != nil {
		return 0, err
	}
	is3D := len(x.Shape) == 3
	p, err := GaussianOptions(dataRange).params(len(x.Shape))
	if err != nil {
		return 0, err
	}
	if err := checkWindow(d, x.Shape, MSSSIMMinSize, is3D); err != nil {
		return 0, fmt.Errorf("metrics: MSSSIM needs every dimension to be at least %d, so that the 5th scale (1/16) holds the %d-sample window; got shape %v",
			MSSSIMMinSize, len(p.taps), x.Shape)
	}
	p.clampVar = true
	p.contrast = true
	ms := math.Pow(max(ssimMean(x.Data, y.Data, d, is3D, &p), 0), msssimBetas[0])
	xs, d2 := avgPool2(x.Data, d, is3D)
	ys, _ := avgPool2(y.Data, d, is3D)
	for _, beta := range msssimBetas[1 : len(msssimBetas)-1] {
		ms *= math.Pow(max(ssimMean(xs, ys, d2, is3D, &p), 0), beta)
		xs, _ = avgPool2(xs, d2, is3D)
		ys, d2 = avgPool2(ys, d2, is3D)
	}
	r := len(p.taps) / 2
	xs, dp := mirrorPad(xs, d2, r, is3D)
	ys, _ = mirrorPad(ys, d2, r, is3D)
	p.contrast = false
	ms *= math.Pow(max(ssimMean(xs, ys, dp, is3D, &p), 0), msssimBetas[len(msssimBetas)-1])
	return ms, nil
}

// avgPool2 averages non-overlapping blocks of 2 samples along H and W (and D
// if is3D), dropping an odd last sample, and returns the result and its
// extents.
func avgPool2[T float32 | float64](v []T, d [3]int, is3D bool) ([]float64, [3]int) {
	o := [3]int{d[0], d[1] / 2, d[2] / 2}
	dz := 1
	if is3D {
		o[0], dz = d[0]/2, 2
	}
	out := make([]float64, o[0]*o[1]*o[2])
	parallelFor(o[0], func(lo, hi int) {
		for z := lo; z < hi; z++ {
			for yy := range o[1] {
				dst := out[(z*o[1]+yy)*o[2]:][:o[2]]
				for dzi := range dz {
					for dy := range 2 {
						row := v[((z*dz+dzi)*d[1]+2*yy+dy)*d[2]:][:2*o[2]]
						for i := range dst {
							dst[i] += float64(row[2*i]) + float64(row[2*i+1])
						}
					}
				}
				n := float64(2 * 2 * dz)
				for i := range dst {
					dst[i] /= n
				}
			}
		}
	})
	return out, o
}

// mirrorPad extends v by r samples on both sides of H and W (and D if is3D)
// by mirroring about the edge sample without repeating it (d c b | a b c d |
// c b a). Every padded dimension must exceed r.
func mirrorPad(v []float64, d [3]int, r int, is3D bool) ([]float64, [3]int) {
	rz := 0
	if is3D {
		rz = r
	}
	o := [3]int{d[0] + 2*rz, d[1] + 2*r, d[2] + 2*r}
	mirror := func(i, n int) int {
		if i < 0 {
			return -i
		}
		if i >= n {
			return 2*(n-1) - i
		}
		return i
	}
	out := make([]float64, o[0]*o[1]*o[2])
	for z := range o[0] {
		sz := mirror(z-rz, d[0])
		for yy := range o[1] {
			src := v[(sz*d[1]+mirror(yy-r, d[1]))*d[2]:][:d[2]]
			dst := out[(z*o[1]+yy)*o[2]:][:o[2]]
			for i := range dst {
				dst[i] = src[mirror(i-r, d[2])]
			}
		}
	}
	return out, o
}
