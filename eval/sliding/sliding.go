// Package sliding reconstructs a whole volume from a model that only accepts
// fixed-size patches, the way MONAI's sliding_window_inference does: the
// volume is covered by overlapping windows on a regular grid, the model
// predicts every window (several per call), and overlapping predictions are
// blended with a per-voxel weighted mean.
//
// Conventions follow MONAI (monai.inferers.sliding_window_inference,
// monai.data.utils.dense_patch_slices and compute_importance_map):
//
//   - scan interval per axis = int(patch × (1 − overlap)), at least 1;
//   - window starts per axis are 0, interval, 2·interval, … while the window
//     fits, plus size − patch (flush with the end) when not already present;
//   - windows are visited in C order of their start triples (last axis
//     fastest), which is also the order patches are handed to the predictor;
//   - the Gaussian importance map is exp(−d²/(2σ²)) per axis with d measured
//     from the patch centre (patch−1)/2 and σ = sigmaScale × patch, the 3D map
//     is the product of the three axes, and values below max(min(map), 1e-3)
//     are raised to that floor so that no voxel has a vanishing weight.
//
// Differences from MONAI, on purpose:
//
//   - a volume smaller than the patch along any axis is an error, where MONAI
//     pads it: the caller pads as its model was trained and crops the result
//     back, so that no metric counts voxels that do not exist
//     (eval.Reconstruct pads with the loader's value);
//   - the Gaussian map is divided by its maximum so its peak is exactly 1
//     (MONAI's peak is below 1 for even patch sizes, whose centre falls
//     between voxels). A constant factor cancels in Σ(w·p)/Σw except where
//     the 1e-3 floor applies: there ortrain's floor is relatively lower by
//     that factor, 0.6 % for 64³ patches (σ = 8);
//   - the map is computed in float64 and stored as float32.
package sliding

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
)

// Mode selects how overlapping window predictions are weighted.
type Mode int

const (
	// Constant gives every voxel of every window the weight 1, so the output
	// is the plain mean of the predictions that cover a voxel.
	Constant Mode = iota
	// Gaussian weights each window by a Gaussian centred on the window, so
	// predictions near a window's border, where the model sees the least
	// context, count less.
	Gaussian
)

// String returns the MONAI name of the mode.
func (m Mode) String() string {
	switch m {
	case Constant:
		return "constant"
	case Gaussian:
		return "gaussian"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode reads a Mode as String writes it.
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{Constant, Gaussian} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("blend mode %q: want constant or gaussian", s)
}

// DefaultSigmaScale is MONAI's default sigma_scale: σ = 0.125 × patch size.
const DefaultSigmaScale = 0.125

// minWeight is MONAI's lower bound for the importance map's floor.
const minWeight = 1e-3

// PredictFunc maps n patches to n output patches of the same shape. batch
// holds n × C × pd × ph × pw values in C order (patch-major, then channel,
// then depth, height, width); the result must have the same length and
// layout. The returned slice is read before PredictFunc is called again, so
// the predictor may reuse its output buffer between calls.
type PredictFunc func(batch []float32, n int) ([]float32, error)

// Options configures Infer. The zero value is not usable: Patch must be set.
type Options struct {
	// Patch is the window size (depth, height, width) the model accepts.
	Patch [3]int
	// Overlap is the fraction in [0, 1) by which neighbouring windows
	// overlap; MONAI's default is 0.25.
	Overlap float64
	// Mode selects the blending weights.
	Mode Mode
	// SigmaScale sets σ = SigmaScale × patch size per axis in Gaussian mode;
	// 0 means DefaultSigmaScale.
	SigmaScale float64
	// BatchSize is the number of windows handed to one predictor call;
	// 0 means 1.
	BatchSize int
	// Channels is the number of channels C of a C×D×H×W volume; 0 means 1.
	Channels int
	// Workers bounds the goroutines used to copy patches and blend
	// predictions; 0 means runtime.GOMAXPROCS(0).
	Workers int
	// Progress, when set, hears of the windows predicted so far after
	// each predictor call (done of total); it is called on Infer's
	// goroutine and should return quickly (throttle any printing).
	Progress func(done, total int)
}

// Interval returns MONAI's scan interval along one axis: int(patch × (1 −
// overlap)), or 1 when that truncates to 0.
func Interval(patch int, overlap float64) int {
	iv := int(float64(patch) * (1 - overlap))
	if iv < 1 {
		return 1
	}
	return iv
}

// Starts returns the window start positions along one axis of length size
// for windows of length patch spaced interval apart: 0, interval, … while
// the window fits, and size − patch if the last of those does not already
// end flush with the axis.
func Starts(size, patch, interval int) ([]int, error) {
	switch {
	case patch < 1:
		return nil, fmt.Errorf("sliding: patch size %d, want ≥ 1", patch)
	case interval < 1:
		return nil, fmt.Errorf("sliding: scan interval %d, want ≥ 1", interval)
	case size < patch:
		return nil, fmt.Errorf("sliding: axis of size %d is smaller than the patch size %d (ortrain does not pad; crop or pad the volume first)", size, patch)
	}
	var s []int
	for p := 0; p <= size-patch; p += interval {
		s = append(s, p)
	}
	if s[len(s)-1] != size-patch {
		s = append(s, size-patch)
	}
	return s, nil
}

// ImportanceMap returns the per-voxel weights of one window of size patch
// (pd×ph×pw, C order) for the given mode; see the package comment for the
// Gaussian's definition. sigmaScale 0 means DefaultSigmaScale.
func ImportanceMap(patch [3]int, mode Mode, sigmaScale float64) ([]float32, error) {
	axes, err := axisWeights(patch, mode, sigmaScale)
	if err != nil {
		return nil, err
	}
	n := patch[0] * patch[1] * patch[2]
	m := make([]float32, 0, n)
	if mode == Constant {
		for range n {
			m = append(m, 1)
		}
		return m, nil
	}
	// The axis profiles peak at 1 (see axisWeights), so the product does too
	// and its minimum is the product of the axis minima at a corner.
	floor := math.Max(axes[0][0]*axes[1][0]*axes[2][0], minWeight)
	for _, a := range axes[0] {
		for _, b := range axes[1] {
			for _, c := range axes[2] {
				m = append(m, float32(math.Max(a*b*c, floor)))
			}
		}
	}
	return m, nil
}

// axisWeights returns the one-dimensional Gaussian profile of each axis,
// divided by its peak, or nil profiles for Constant.
func axisWeights(patch [3]int, mode Mode, sigmaScale float64) ([3][]float64, error) {
	var axes [3][]float64
	for _, p := range patch {
		if p < 1 {
			return axes, fmt.Errorf("sliding: patch size %v, want every axis ≥ 1", patch)
		}
	}
	switch mode {
	case Constant:
		return axes, nil
	case Gaussian:
	default:
		return axes, fmt.Errorf("sliding: unknown blend mode %v", mode)
	}
	if sigmaScale == 0 {
		sigmaScale = DefaultSigmaScale
	}
	if !(sigmaScale > 0) || math.IsInf(sigmaScale, 0) {
		return axes, fmt.Errorf("sliding: sigma scale %v, want a finite value > 0", sigmaScale)
	}
	for i, p := range patch {
		sigma := sigmaScale * float64(p)
		centre := float64(p-1) / 2
		// The peak is at the voxel nearest the centre: 0 or 0.5 voxels away.
		d0 := centre - math.Floor(centre)
		peak := math.Exp(-d0 * d0 / (2 * sigma * sigma))
		g := make([]float64, p)
		for j := range g {
			d := float64(j) - centre
			g[j] = math.Exp(-d*d/(2*sigma*sigma)) / peak
		}
		axes[i] = g
	}
	return axes, nil
}

// geometry is the window grid of one volume shape.
type geometry struct {
	shape    [3]int
	patch    [3]int
	starts   [3][]int
	channels int
}

// windows returns the number of windows.
func (g *geometry) windows() int {
	return len(g.starts[0]) * len(g.starts[1]) * len(g.starts[2])
}

// origin returns the start triple of window k in C order of the grid.
func (g *geometry) origin(k int) [3]int {
	nx, ny := len(g.starts[2]), len(g.starts[1])
	return [3]int{g.starts[0][k/(nx*ny)], g.starts[1][(k/nx)%ny], g.starts[2][k%nx]}
}

// Infer reconstructs vol, a C×D×H×W volume (C = opt.Channels) of spatial
// shape shape, by predicting overlapping windows of size opt.Patch with
// predict and blending the predictions: out = Σ(w·prediction)/Σw per voxel.
// The context is checked between predictor calls.
//
// Memory: the result is accumulated in place in the returned float32 slice
// (one volume). Constant mode needs nothing else, because on a regular grid
// the number of windows covering voxel (z, y, x) is the product of the
// per-axis counts. Gaussian mode also keeps Σw in one float32 array of D×H×W
// voxels (shared by the channels): the floor MONAI applies to the map makes
// it non-separable, so Σw cannot be rebuilt from per-axis sums. Peak memory
// is thus about two volumes plus one batch of patches in and out; float32
// sums of at most a few hundred positive terms lose far less precision than
// the model's own error.
func Infer(ctx context.Context, vol []float32, shape [3]int, opt Options, predict PredictFunc) ([]float32, error) {
	g, err := plan(len(vol), shape, opt)
	if err != nil {
		return nil, err
	}
	if predict == nil {
		return nil, errors.New("sliding: nil predictor")
	}
	var weights []float32
	switch opt.Mode {
	case Constant:
	case Gaussian:
		if weights, err = ImportanceMap(opt.Patch, opt.Mode, opt.SigmaScale); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("sliding: unknown blend mode %v", opt.Mode)
	}
	batch := max(opt.BatchSize, 1)
	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}

	out := make([]float32, len(vol))
	var wsum []float32
	if weights != nil {
		wsum = make([]float32, shape[0]*shape[1]*shape[2])
	}
	patchLen := g.channels * opt.Patch[0] * opt.Patch[1] * opt.Patch[2]
	in := make([]float32, batch*patchLen)
	total := g.windows()
	for first := 0; first < total; first += batch {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := min(batch, total-first)
		g.gather(vol, in[:n*patchLen], first, n, workers)
		pred, err := predict(in[:n*patchLen], n)
		if err != nil {
			return nil, fmt.Errorf("sliding: predicting windows %d–%d of %d: %w", first+1, first+n, total, err)
		}
		if len(pred) != n*patchLen {
			return nil, fmt.Errorf("sliding: predictor returned %d values for %d windows of %d×%v, want %d", len(pred), n, g.channels, opt.Patch, n*patchLen)
		}
		g.scatter(out, wsum, pred, weights, first, n, workers)
		if opt.Progress != nil {
			opt.Progress(first+n, total)
		}
	}
	g.normalise(out, wsum, workers)
	return out, nil
}

// Windows returns the number of windows Infer predicts for a volume of
// the given spatial shape: the product of the per-axis start counts.
func Windows(shape [3]int, opt Options) (int, error) {
	n := 1
	for i := range 3 {
		if !(opt.Overlap >= 0 && opt.Overlap < 1) {
			return 0, fmt.Errorf("sliding: overlap %v, want a fraction in [0, 1)", opt.Overlap)
		}
		s, err := Starts(shape[i], opt.Patch[i], Interval(opt.Patch[i], opt.Overlap))
		if err != nil {
			return 0, err
		}
		n *= len(s)
	}
	return n, nil
}

// Interval returns the scan interval of each axis for these options.
func (o Options) Interval() [3]int {
	return [3]int{Interval(o.Patch[0], o.Overlap), Interval(o.Patch[1], o.Overlap), Interval(o.Patch[2], o.Overlap)}
}

// plan validates the inputs of Infer and lays out the window grid.
func plan(n int, shape [3]int, opt Options) (*geometry, error) {
	c := opt.Channels
	if c == 0 {
		c = 1
	}
	switch {
	case c < 0:
		return nil, fmt.Errorf("sliding: %d channels, want ≥ 1", c)
	case shape[0] < 1 || shape[1] < 1 || shape[2] < 1:
		return nil, fmt.Errorf("sliding: volume shape %v, want every axis ≥ 1", shape)
	case n != c*shape[0]*shape[1]*shape[2]:
		return nil, fmt.Errorf("sliding: volume has %d values, shape %d×%v needs %d", n, c, shape, c*shape[0]*shape[1]*shape[2])
	case opt.Patch[0] < 1 || opt.Patch[1] < 1 || opt.Patch[2] < 1:
		return nil, fmt.Errorf("sliding: patch size %v, want every axis ≥ 1", opt.Patch)
	case !(opt.Overlap >= 0 && opt.Overlap < 1):
		return nil, fmt.Errorf("sliding: overlap %v, want a fraction in [0, 1)", opt.Overlap)
	case opt.BatchSize < 0:
		return nil, fmt.Errorf("sliding: batch size %d, want ≥ 0", opt.BatchSize)
	}
	for i := range 3 {
		if shape[i] < opt.Patch[i] {
			return nil, fmt.Errorf("sliding: volume shape %v is smaller than the patch %v along axis %d (ortrain does not pad; crop or pad the volume first)", shape, opt.Patch, i)
		}
	}
	g := &geometry{shape: shape, patch: opt.Patch, channels: c}
	iv := opt.Interval()
	for i := range 3 {
		s, err := Starts(shape[i], opt.Patch[i], iv[i])
		if err != nil {
			return nil, err
		}
		g.starts[i] = s
	}
	return g, nil
}

// parallel runs f over [0, n) split into at most workers contiguous ranges.
func parallel(n, workers int, f func(lo, hi int)) {
	workers = min(workers, n)
	if workers <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := n*w/workers, n*(w+1)/workers
		wg.Go(func() { f(lo, hi) })
	}
	wg.Wait()
}

// gather copies windows first … first+n−1 of vol into dst, one patch after
// another. Patch rows are independent, so they are split among workers.
func (g *geometry) gather(vol, dst []float32, first, n, workers int) {
	pd, ph, pw := g.patch[0], g.patch[1], g.patch[2]
	_, h, w := g.shape[0], g.shape[1], g.shape[2]
	vox := g.shape[0] * h * w
	rowsPerPatch := g.channels * pd * ph
	parallel(n*rowsPerPatch, workers, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			k, rr := r/rowsPerPatch, r%rowsPerPatch
			c, zy := rr/(pd*ph), rr%(pd*ph)
			o := g.origin(first + k)
			src := c*vox + ((o[0]+zy/ph)*h+o[1]+zy%ph)*w + o[2]
			copy(dst[r*pw:(r+1)*pw], vol[src:src+pw])
		}
	})
}

// scatter adds the weighted predictions of windows first … first+n−1 to
// out, and their weights to wsum in Gaussian mode. Windows of one batch
// overlap, so the work is split by volume depth: each worker owns a range of
// z-planes and adds every window's share of them, which needs no locks.
func (g *geometry) scatter(out, wsum, pred, weights []float32, first, n, workers int) {
	pd, ph, pw := g.patch[0], g.patch[1], g.patch[2]
	_, h, w := g.shape[0], g.shape[1], g.shape[2]
	vox := g.shape[0] * h * w
	z0, z1 := g.shape[0], 0
	for k := range n {
		o := g.origin(first + k)
		z0, z1 = min(z0, o[0]), max(z1, o[0]+pd)
	}
	patchLen := g.channels * pd * ph * pw
	parallel(z1-z0, workers, func(lo, hi int) {
		lo, hi = lo+z0, hi+z0
		for k := range n {
			o := g.origin(first + k)
			zs, ze := max(lo, o[0]), min(hi, o[0]+pd)
			for z := zs; z < ze; z++ {
				for y := range ph {
					prow := (z-o[0])*ph*pw + y*pw
					vrow := ((z*h)+o[1]+y)*w + o[2]
					for c := range g.channels {
						p := pred[k*patchLen+c*pd*ph*pw+prow:][:pw]
						v := out[c*vox+vrow:][:pw]
						if weights == nil {
							for x, val := range p {
								v[x] += val
							}
							continue
						}
						wr := weights[prow:][:pw]
						for x, val := range p {
							v[x] += wr[x] * val
						}
					}
					if weights != nil {
						ws := wsum[vrow:][:pw]
						for x, wt := range weights[prow:][:pw] {
							ws[x] += wt
						}
					}
				}
			}
		}
	})
}

// normalise divides the accumulated sums by the weight sums. In Constant
// mode the weight sum is the window count, the product of the per-axis
// counts of windows covering each coordinate.
func (g *geometry) normalise(out, wsum []float32, workers int) {
	d, h, w := g.shape[0], g.shape[1], g.shape[2]
	vox := d * h * w
	var counts [3][]float32
	if wsum == nil {
		for i := range 3 {
			counts[i] = make([]float32, g.shape[i])
			for _, s := range g.starts[i] {
				for j := s; j < s+g.patch[i]; j++ {
					counts[i][j]++
				}
			}
		}
	}
	parallel(d, workers, func(lo, hi int) {
		for z := lo; z < hi; z++ {
			for y := range h {
				row := (z*h + y) * w
				for c := range g.channels {
					v := out[c*vox+row:][:w]
					if wsum != nil {
						for x, s := range wsum[row:][:w] {
							v[x] /= s
						}
						continue
					}
					czy := counts[0][z] * counts[1][y]
					for x, cx := range counts[2] {
						v[x] /= czy * cx
					}
				}
			}
		}
	})
}
