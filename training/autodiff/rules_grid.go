package autodiff

import (
	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

func init() { rules["GridSample"] = gridSampleGrad }

// gridSampleGrad: GridSample with linear (bilinear, trilinear) or nearest
// interpolation on 4-D or 5-D inputs. Each output point reads the 2^k
// corners around its pixel coordinate u (one pixel for nearest) with
// weights linear in u along each axis. dX scatters dY·weight onto the
// corners (ScatterElements, reduction add, over X flattened to [N, C, Q]);
// dgrid gathers the corner values, sums dY·value·dweight/du over the
// channels and chains through the padding (0 where clipped, ±1 where
// reflected) and the un-normalisation. Nearest sampling is piecewise
// constant in the grid, so its grid gradient is zero, as in PyTorch. The
// spatial sizes of X must be static; batch, channels and the grid's sizes
// may vary.
func gridSampleGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	g := dy[0]
	if g == "" {
		return dx
	}
	mode := n.String("mode", "linear") // "bilinear" before opset 20
	linear := mode == "linear" || mode == "bilinear"
	pad := n.String("padding_mode", "zeros")
	if !linear && mode != "nearest" {
		b.Fail("GridSample mode %s has no gradient rule (linear/bilinear and nearest are supported)", mode)
		return dx
	}
	if pad != "zeros" && pad != "border" && pad != "reflection" {
		b.Fail("GridSample padding_mode %s has no gradient rule (zeros, border and reflection are supported)", pad)
		return dx
	}
	align := n.Int("align_corners", 0) != 0
	xv, grid := x(n), n.Inputs[1]
	xi, gi := b.Info(xv), b.Info(grid)
	k := xi.Rank() - 2
	if k != 2 && k != 3 || gi.Rank() != k+2 || gi.Shape[k+1] >= 0 && gi.Shape[k+1] != int64(k) {
		b.Fail("GridSample needs a known 4-D or 5-D input X and a grid of the same rank whose last dim is 2 or 3 to match, has X %v, grid %v", xi, gi)
		return dx
	}
	sizes := xi.Shape[2:]
	for i, d := range sizes {
		if d < 0 {
			b.Fail("GridSample needs the spatial sizes of its input X static: dim %d is unknown in %v", i+2, xi)
			return dx
		}
	}
	if !linear && !need[0] {
		return dx
	}
	dt := xi.DType
	if gi.DType != dt {
		grid = b.Cast(grid, dt)
	}
	c := func(v float64) string { return b.Scalar(dt, v) }
	ones := func(lead []int64, last int64) []int64 {
		s := append([]int64(nil), lead...)
		for range k {
			s = append(s, 1)
		}
		return append(s, last)
	}
	// Per-axis tensors are laid out [N, 1, c_0, ..., c_{k-1}, P]: a channel
	// axis, one corner axis per spatial axis (2 where that axis has two
	// corners) and the P output points, so products over the axes
	// broadcast into all 2^k corners. The grid is read as [N, k, P].
	pts := b.Transpose(b.Reshape(grid, b.Ints(0, -1, int64(k))), 0, 2, 1)
	w := make([]string, k)     // corner weights along each axis ("" for nearest)
	du := make([]string, k)    // d(padded coordinate)/d(grid)
	var flat, wm, valid string // flat corner index into Q, weight·validity, validity
	stride := int64(1)
	for d := k - 1; d >= 0; d-- {
		s := float64(sizes[d])
		// grid[..., 0] is x (the last axis), grid[..., 1] is y, ...
		gd := b.Reshape(b.Slice(pts, []int64{int64(k - 1 - d)}, []int64{int64(k - d)}, []int64{1}, nil), b.Ints(ones([]int64{0, 1}, -1)...))
		// Un-normalised in ONNX Runtime's order of operations, so its
		// floors and roundings fall on the same side.
		var u string
		scale := s / 2
		if align {
			u, scale = b.Mul(b.Mul(b.Add(gd, c(1)), c(0.5)), c(s-1)), (s-1)/2
		} else {
			u = b.Mul(b.Sub(b.Mul(b.Add(gd, c(1)), c(s)), c(1)), c(0.5))
		}
		if !linear {
			// ONNX Runtime rounds (half to even) before padding.
			u = b.Op("Round", []string{u})
		}
		u, du[d] = gridPad(b, u, pad, align, s, dt)
		du[d] = b.Mul(du[d], c(scale))
		idx := u
		if linear {
			i0 := b.Op("Floor", []string{u})
			f := b.Sub(u, i0)
			idx = b.Concat(int64(2+d), i0, b.Add(i0, c(1)))
			w[d] = b.Concat(int64(2+d), b.Sub(c(1), f), f)
		}
		// Corners outside X read zeros (padding zeros; with border and
		// reflection only a corner of weight 0 steps out).
		m := b.Cast(b.Not(b.Or(b.Less(idx, c(0)), b.Greater(idx, c(s-1)))), dt)
		ic := b.Cast(b.Min(b.Max(idx, c(0)), c(s-1)), dtype.Int64)
		if stride != 1 {
			ic = b.Mul(ic, b.Const(graph.Int64s("", nil, []int64{stride})))
		}
		stride *= sizes[d]
		wd := m
		if linear {
			wd = b.Mul(w[d], m)
		}
		if flat == "" {
			flat, wm, valid = ic, wd, m
		} else {
			flat, wm, valid = b.Add(flat, ic), b.Mul(wm, wd), b.Mul(valid, m)
		}
	}

	dyc := b.Reshape(g, b.Ints(ones([]int64{0, 0}, -1)...)) // [N, C, 1.., P]
	xf := b.Reshape(xv, b.Ints(0, 0, -1))                   // [N, C, Q]
	// The corner indices, broadcast over the channels: [N, C, 2^k·P].
	chans := b.Ints(1, xi.Shape[1], 1)
	if xi.Shape[1] < 0 {
		chans = b.Concat(0, b.Ints(1), b.Slice(b.Shape(xv), []int64{1}, []int64{2}, []int64{0}, nil), b.Ints(1))
	}
	at := b.Op("Expand", []string{b.Reshape(flat, b.Ints(0, 1, -1)), chans})
	if need[0] {
		upd := b.Reshape(b.Mul(dyc, wm), b.Ints(0, 0, -1))
		sc := b.Op("ScatterElements", []string{b.ZerosLike(xf), at, upd}, graph.AInt("axis", 2), graph.AString("reduction", "add"))
		dx[0] = b.ReshapeLike(sc, xv)
	}
	if linear && need[1] {
		corners := []int64{0, 0}
		var cornerAxes []int64
		for d := range k {
			corners = append(corners, 2)
			cornerAxes = append(cornerAxes, int64(2+d))
		}
		v := b.Reshape(b.Op("GatherElements", []string{xf, at}, graph.AInt("axis", 2)), b.Ints(append(corners, -1)...))
		// Σ_C dY·X at each corner, zero where the corner is outside.
		gv := b.Mul(b.ReduceSum(b.Mul(v, dyc), true, 1), valid) // [N, 1, 2.., P]
		comps := make([]string, k)
		for d := range k {
			// d weight/du along axis d is -1 at the lower corner, +1 at the
			// upper; the other axes keep their weights.
			sh := ones([]int64{1, 1}, 1)
			sh[2+d] = 2
			sign, err := graph.Floats("", dt, sh, []float64{-1, 1})
			if err != nil {
				b.Fail("%v", err)
				return dx
			}
			t := b.Mul(gv, b.Const(sign))
			for e := range k {
				if e != d {
					t = b.Mul(t, w[e])
				}
			}
			comps[k-1-d] = b.ReduceSum(b.Mul(t, du[d]), false, cornerAxes...) // [N, 1, P]
		}
		dg := b.ReshapeLike(b.Transpose(b.Concat(1, comps...), 0, 2, 1), n.Inputs[1])
		if gi.DType != dt {
			dg = b.Cast(dg, gi.DType)
		}
		dx[1] = dg
	}
	return dx
}

// gridPad applies padding_mode to the pixel coordinate u along an axis of
// size s and returns the coordinate used and its derivative. Border clips
// to [0, s-1]. Reflection folds u into [lo, hi] (the centres of the edge
// pixels with align_corners, their outer edges without), mirroring at each
// end so the derivative flips sign with every reflection, and then clips
// what lies beyond the edge pixels' centres.
func gridPad(b *B, u, pad string, align bool, s float64, dt dtype.DType) (string, string) {
	c := func(v float64) string { return b.Scalar(dt, v) }
	if pad == "zeros" {
		return u, c(1)
	}
	var d string
	lo, hi := -0.5, s-0.5
	if align {
		lo, hi = 0, s-1
	}
	if pad == "reflection" && hi > lo {
		span := hi - lo
		t := b.Sub(u, c(lo))
		a := b.Abs(t)
		flips := b.Op("Floor", []string{b.Div(a, c(span))})
		extra := b.Sub(a, b.Mul(flips, c(span)))
		odd := b.Sub(flips, b.Mul(b.Op("Floor", []string{b.Mul(flips, c(0.5))}), c(2))) // 0 or 1
		// An even number of reflections leaves lo + extra, an odd one hi - extra.
		u = b.Add(b.Add(extra, b.Mul(odd, b.Sub(c(span), b.Mul(extra, c(2))))), c(lo))
		d = b.Mul(b.Where(b.Less(t, c(0)), c(-1), c(1)), b.Sub(c(1), b.Mul(odd, c(2))))
	}
	// Clipping is flat from s-1 on: a coordinate exactly there takes that
	// side's slope, 0, not the slope towards a corner beyond the edge,
	// which is neither one-sided derivative (at 0 the interior's, the
	// right-hand one, is kept).
	inside := b.Cast(b.Op("And", []string{b.Not(b.Less(u, c(0))), b.Less(u, c(s-1))}), dt)
	if d == "" {
		d = inside
	} else {
		d = b.Mul(d, inside)
	}
	return b.Min(b.Max(u, c(0)), c(s-1)), d
}
