package tokens

import (
	"fmt"
	"math/rand/v2"

	"github.com/ortrain/ortrain/training/data"
)

// Antithetic is BD3-LM's antithetic sampling of the noise levels, as a
// batch transform (data.Config.Mix) over a batch the Dataset loaded with
// Noise: the batch's n levels, one per block (or segment) of each row in
// row-major order, become (u_i + i)/n with u_i uniform, so that together
// they cover [0, 1) evenly and the loss's spread across batches shrinks;
// each is then mapped to [MinNoise, MaxNoise) and noisy_ids masked again
// at the new levels.
type Antithetic struct {
	BlockSize          int  // BD3-LM's blocks; with Segmented, segment_ids groups
	Segmented          bool // HDP-Diffusion: one level per segment
	MinNoise, MaxNoise float64
}

// Mix redraws b's levels and masks from rng.
func (a Antithetic) Mix(b *data.Batch, rng *rand.Rand) error {
	ids, loss, seg, noisy, t := b.Tensor("input_ids"), b.Tensor("loss_mask"), b.Tensor("segment_ids"), b.Tensor("noisy_ids"), b.Tensor("t")
	if ids == nil || loss == nil || seg == nil || noisy == nil || t == nil {
		return fmt.Errorf("tokens: antithetic sampling needs input_ids, loss_mask, segment_ids, noisy_ids and t")
	}
	if !a.Segmented && a.BlockSize < 1 {
		return fmt.Errorf("tokens: antithetic sampling needs the block size")
	}
	lo, hi := a.MinNoise, a.MaxNoise
	if hi == 0 {
		hi = 1
	}
	rows := len(b.Indices)
	L := len(ids.I64) / max(rows, 1)
	group := func(r, p int) int64 {
		if a.Segmented {
			return seg.I64[r*L+p]
		}
		return int64(p / a.BlockSize)
	}
	n := 0
	for r := range rows {
		for p := range L {
			if p == 0 || group(r, p) != group(r, p-1) {
				n++
			}
		}
	}
	i, level := 0, 0.0
	for r := range rows {
		for p := range L {
			k := r*L + p
			if p == 0 || group(r, p) != group(r, p-1) {
				level = lo + (hi-lo)*(rng.Float64()+float64(i))/float64(n)
				i++
			}
			t.F32[k] = float32(level)
			noisy.I64[k] = ids.I64[k]
			if loss.U8[k] == 1 && rng.Float64() < level {
				noisy.I64[k] = Mask
			}
		}
	}
	return nil
}
