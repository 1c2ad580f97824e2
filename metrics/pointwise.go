package metrics

import (
	"errors"
	"fmt"
	"math"
)

// blockSize is how many elements are summed sequentially in float64 before
// the partial sum enters an exact sum. It is fixed, so a result does not
// depend on how many goroutines computed it. A block sum of float64 squared
// differences has a relative rounding error below blockSize·2^-53 ≈ 1e-12
// and in practice near 1e-15.
const blockSize = 1 << 13

// ErrorAccumulator accumulates the squared and absolute differences between
// predictions and targets over any number of batches, and reports MSE, MAE
// and the PSNR of the pooled MSE (torchmetrics' PeakSignalNoiseRatio
// convention). For the mean of per-volume PSNR values, the usual convention in
// papers, add each volume's PSNR to a Mean instead.
//
// Each Add sums its batch in fixed blocks of float64 and keeps the block sums
// exactly, so Value methods do not depend on the order of Add and Merge calls
// nor on the number of CPUs. The zero value is ready to use.
type ErrorAccumulator struct {
	sq, abs exactSum
	n       int64
}

// Add accumulates the element-wise differences x[i] - y[i]. It returns an
// error, leaving a unchanged, if the lengths differ or an input is NaN or Inf.
func (a *ErrorAccumulator) Add(x, y []float32) error {
	if len(x) != len(y) {
		return fmt.Errorf("metrics: lengths differ: x has %d values, y has %d", len(x), len(y))
	}
	nb := (len(x) + blockSize - 1) / blockSize
	sq := make([]float64, nb)
	abs := make([]float64, nb)
	parallelFor(nb, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			xs := x[b*blockSize : min((b+1)*blockSize, len(x))]
			ys := y[b*blockSize:][:len(xs)]
			var q, m float64
			for i, xv := range xs {
				d := float64(xv) - float64(ys[i])
				q += d * d
				m += math.Abs(d)
			}
			sq[b], abs[b] = q, m
		}
	})
	var part ErrorAccumulator
	for b := range nb {
		// Squares of float32 differences cannot overflow float64, so a
		// non-finite block sum means a non-finite input in that block.
		if math.IsNaN(sq[b]) || math.IsInf(sq[b], 0) {
			hi := min((b+1)*blockSize, len(x))
			if err := checkFinite("x", x[:hi]); err != nil {
				return err
			}
			return checkFinite("y", y[:hi])
		}
		part.sq.add(sq[b])
		part.abs.add(abs[b])
	}
	part.n = int64(len(x))
	a.Merge(&part)
	return nil
}

// Merge adds the differences accumulated by o to a.
func (a *ErrorAccumulator) Merge(o *ErrorAccumulator) {
	a.sq.merge(&o.sq)
	a.abs.merge(&o.abs)
	a.n += o.n
}

// Count returns the number of element pairs accumulated.
func (a *ErrorAccumulator) Count() int64 { return a.n }

var errEmpty = errors.New("metrics: no values accumulated")

// MSE returns the mean squared error, or an error if nothing was added.
func (a *ErrorAccumulator) MSE() (float64, error) {
	if a.n == 0 {
		return 0, errEmpty
	}
	return a.sq.value() / float64(a.n), nil
}

// MAE returns the mean absolute error, or an error if nothing was added.
func (a *ErrorAccumulator) MAE() (float64, error) {
	if a.n == 0 {
		return 0, errEmpty
	}
	return a.abs.value() / float64(a.n), nil
}

// PSNR returns the peak signal-to-noise ratio 10·log10(dataRange²/MSE) in
// decibels, as scikit-image's peak_signal_noise_ratio. dataRange is the
// extent of the possible values (max - min, e.g. 1 for images in [0, 1]) and
// must be positive and finite. Identical inputs (MSE = 0) give +Inf.
func (a *ErrorAccumulator) PSNR(dataRange float64) (float64, error) {
	if err := checkDataRange(dataRange); err != nil {
		return 0, err
	}
	mse, err := a.MSE()
	if err != nil {
		return 0, err
	}
	return 10 * math.Log10(dataRange*dataRange/mse), nil
}

func checkDataRange(r float64) error {
	if !(r > 0) || math.IsInf(r, 0) {
		return fmt.Errorf("metrics: data range %v must be positive and finite", r)
	}
	return nil
}

// PSNR returns the peak signal-to-noise ratio of y against x in decibels,
// 10·log10(dataRange²/MSE(x, y)), equal to scikit-image's
// peak_signal_noise_ratio(x, y, data_range=dataRange). Identical inputs give
// +Inf. Errors: lengths differ, empty input, NaN or Inf in an input, or a
// non-positive dataRange.
func PSNR(x, y []float32, dataRange float64) (float64, error) {
	if err := checkDataRange(dataRange); err != nil {
		return 0, err
	}
	var a ErrorAccumulator
	if err := a.Add(x, y); err != nil {
		return 0, err
	}
	return a.PSNR(dataRange)
}

// MSE returns the mean of (x[i] - y[i])², as scikit-image's
// mean_squared_error. Errors: lengths differ, empty input, NaN or Inf.
func MSE(x, y []float32) (float64, error) {
	var a ErrorAccumulator
	if err := a.Add(x, y); err != nil {
		return 0, err
	}
	return a.MSE()
}

// MAE returns the mean of |x[i] - y[i]|. Errors: lengths differ, empty
// input, NaN or Inf.
func MAE(x, y []float32) (float64, error) {
	var a ErrorAccumulator
	if err := a.Add(x, y); err != nil {
		return 0, err
	}
	return a.MAE()
}

// Mean accumulates the arithmetic mean of per-sample values, such as the
// PSNR or SSIM of each volume in a test set. The sum is kept exactly, so
// Value does not depend on the order of Add and Merge calls. The zero value
// is ready to use.
type Mean struct {
	sum exactSum
	n   int64
}

// Add adds one value. NaN and ±Inf are rejected with an error (note that
// PSNR of identical volumes is +Inf, whose mean is not a useful number).
func (m *Mean) Add(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("metrics: Mean.Add(%v): values must be finite", v)
	}
	m.sum.add(v)
	m.n++
	return nil
}

// Merge adds the values accumulated by o to m.
func (m *Mean) Merge(o *Mean) {
	m.sum.merge(&o.sum)
	m.n += o.n
}

// Count returns the number of values added.
func (m *Mean) Count() int64 { return m.n }

// Value returns the mean of the values added, or an error if there are none.
func (m *Mean) Value() (float64, error) {
	if m.n == 0 {
		return 0, errEmpty
	}
	return m.sum.value() / float64(m.n), nil
}
