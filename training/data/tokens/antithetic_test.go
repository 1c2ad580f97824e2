package tokens

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ortrain/ortrain/training/data"
)

// antitheticBatch is rows sequences of L tokens with ids 1.., the last
// quarter of each row unscored, and segment ids [0 0 1 1 1 2 ...] by
// thirds.
func antitheticBatch(rows, L int) *data.Batch {
	b := &data.Batch{Indices: make([]int, rows)}
	mk := func(name string, dt data.DType) *data.Tensor {
		t := &data.Tensor{Name: name, DType: dt, Shape: []int{rows, L}}
		switch dt {
		case data.Int64:
			t.I64 = make([]int64, rows*L)
		case data.Float32:
			t.F32 = make([]float32, rows*L)
		default:
			t.U8 = make([]uint8, rows*L)
		}
		b.Tensors = append(b.Tensors, t)
		return t
	}
	ids, loss, seg := mk("input_ids", data.Int64), mk("loss_mask", data.Uint8), mk("segment_ids", data.Int64)
	mk("noisy_ids", data.Int64)
	mk("t", data.Float32)
	for r := range rows {
		for p := range L {
			k := r*L + p
			ids.I64[k] = int64(k + 1)
			if p < 3*L/4 {
				loss.U8[k] = 1
			}
			seg.I64[k] = int64(3 * p / L)
		}
	}
	return b
}

// TestAntithetic: the batch's levels, one per block in row-major order,
// take one stratum each of [min, max) (level i in [i/n, (i+1)/n) of the
// range), constant over a block; only scored positions are masked, the
// others keep their ids; the same draws give the same batch; with
// Segmented the groups are the segments.
func TestAntithetic(t *testing.T) {
	const rows, L, block = 4, 16, 4
	a := Antithetic{BlockSize: block, MinNoise: 0.1, MaxNoise: 0.9}
	b := antitheticBatch(rows, L)
	if err := a.Mix(b, rand.New(rand.NewPCG(1, 2))); err != nil {
		t.Fatal(err)
	}
	tt, noisy, ids, loss := b.Tensor("t").F32, b.Tensor("noisy_ids").I64, b.Tensor("input_ids").I64, b.Tensor("loss_mask").U8
	n := rows * L / block
	masked := 0
	for k := range tt {
		i := k / block // the block's place in row-major order
		lo, hi := 0.1+0.8*float64(i)/float64(n), 0.1+0.8*float64(i+1)/float64(n)
		if v := float64(tt[k]); v < lo-1e-6 || v >= hi+1e-6 || tt[k] != tt[i*block] {
			t.Fatalf("position %d: level %g, want in stratum [%g, %g) and one level per block", k, v, lo, hi)
		}
		switch {
		case noisy[k] == Mask:
			masked++
			if loss[k] == 0 {
				t.Fatalf("position %d is masked but not scored", k)
			}
		case noisy[k] != ids[k]:
			t.Fatalf("position %d: noisy id %d, input %d", k, noisy[k], ids[k])
		}
	}
	if masked == 0 {
		t.Error("nothing masked")
	}
	again := antitheticBatch(rows, L)
	a.Mix(again, rand.New(rand.NewPCG(1, 2)))
	if !slices.Equal(again.Tensor("t").F32, tt) || !slices.Equal(again.Tensor("noisy_ids").I64, noisy) {
		t.Error("the same draws gave another batch")
	}
	s := antitheticBatch(rows, L)
	if err := (Antithetic{Segmented: true}).Mix(s, rand.New(rand.NewPCG(3, 4))); err != nil {
		t.Fatal(err)
	}
	st, seg := s.Tensor("t").F32, s.Tensor("segment_ids").I64
	for k := 1; k < len(st); k++ {
		if same := seg[k] == seg[k-1] && k%L != 0; same != (st[k] == st[k-1]) {
			t.Fatalf("segmented: position %d level %g after %g (segments %d, %d)", k, st[k], st[k-1], seg[k-1], seg[k])
		}
	}
}
