package autodiff

import "github.com/ortrain/ortrain/training/graph"

func init() {
	rules["LRN"] = unary(lrnGrad)
	rules["LpNormalization"] = unary(lpNormGrad)
	rules["MeanVarianceNormalization"] = unary(mvnGrad)
	// CastLike casts to its second input's type, which gets no gradient.
	rules["CastLike"] = unary(func(b *B, n *N, dy string) string { return b.Cast(dy, b.Info(x(n)).DType) })
	rules["CumSum"] = unary(cumSumGrad)
}

// cumSumGrad: each output sums the inputs before it (after it when
// reversed), so an input's gradient sums the output gradients after it:
// the cumulative sum the other way, exclusive when the forward was.
func cumSumGrad(b *B, n *N, dy string) string {
	return b.Op("CumSum", []string{dy, n.Input(1)}, graph.AInt("exclusive", n.Int("exclusive", 0)), graph.AInt("reverse", 1-n.Int("reverse", 0)))
}

// mvnGrad: MeanVarianceNormalization is y = d/(σ + ε) over axes (default
// N, H, W), with d = x − E[x], σ = √(E[x²] − E[x]²) and ε = 1e-9 (the ONNX
// function). With s = σ + ε: dx = (dy − E[dy])/s − E[dy·d]·d/(s²·σ).
func mvnGrad(b *B, n *N, dy string) string {
	axes := n.Ints("axes")
	if n.Attr("axes") == nil {
		axes = []int64{0, 2, 3}
	}
	c := func(v float64) string { return b.ScalarLike(dy, v) }
	d := b.Sub(x(n), b.ReduceMean(x(n), true, axes...))
	sigma := b.Sqrt(b.ReduceMean(b.Mul(d, d), true, axes...))
	s := b.Add(sigma, c(1e-9))
	centred := b.Div(b.Sub(dy, b.ReduceMean(dy, true, axes...)), s)
	return b.Sub(centred, b.Div(b.Mul(b.ReduceMean(b.Mul(dy, d), true, axes...), d), b.Mul(b.Mul(s, s), sigma)))
}

// lrnGrad: LRN divides x by s^β, s = bias + α/size·Σ x² over a window of
// channels [c − lo, c + hi] (lo = ⌊(size−1)/2⌋, hi = ⌈(size−1)/2⌉). Then
// dx_i = dy_i·s_i^−β − 2αβ/size·x_i·Σ_j dy_j·x_j·s_j^(−β−1) over the
// channels j whose window holds i, that is the window [i − hi, i + lo].
func lrnGrad(b *B, n *N, dy string) string {
	xi := b.Info(x(n))
	if !xi.Known || xi.Rank() < 3 {
		return b.Fail("LRN needs an input of known rank (N, C, spatial...), has %v", xi)
	}
	size := n.Int("size", 0)
	if size < 1 {
		return b.Fail("LRN size %d", size)
	}
	alpha, beta, bias := float64(n.Float("alpha", 1e-4)), float64(n.Float("beta", 0.75)), float64(n.Float("bias", 1))
	lo, hi := (size-1)/2, size/2
	c := func(v float64) string { return b.ScalarLike(dy, v) }
	s := b.Add(c(bias), b.Mul(c(alpha/float64(size)), channelWindowSum(b, b.Mul(x(n), x(n)), xi.Rank(), lo, hi)))
	direct := b.Mul(dy, b.Pow(s, c(-beta)))
	back := channelWindowSum(b, b.Mul(b.Mul(dy, x(n)), b.Pow(s, c(-beta-1))), xi.Rank(), hi, lo)
	return b.Sub(direct, b.Mul(c(2*alpha*beta/float64(size)), b.Mul(x(n), back)))
}

// channelWindowSum returns Σ v[c+k] for k in [−before, after] along axis 1,
// zero beyond the ends, for a value of the given rank: v padded with zeros
// on that axis, then one slice per offset.
func channelWindowSum(b *B, v string, rank int, before, after int64) string {
	pads := make([]int64, 2*rank)
	pads[1], pads[rank+1] = before, after
	padded := b.Pad(v, pads)
	var sum string
	for k := range before + after + 1 {
		// The slice [k, k + C) of the padded axis, which is C + before +
		// after long: it ends (before + after − k) before its end.
		end := -(before + after - k)
		if end == 0 {
			end = 1 << 62
		}
		part := b.Slice(padded, []int64{k}, []int64{end}, []int64{1}, nil)
		if sum == "" {
			sum = part
		} else {
			sum = b.Add(sum, part)
		}
	}
	return sum
}

// lpNormGrad: y = x/‖x‖_p along axis (p 1 or 2). With n the norm and g its
// derivative over n (y for p = 2, sign(x) for p = 1), dx = (dy −
// g·Σ dy·y)/n; a slice whose norm is 0 gets 0, as its output is.
func lpNormGrad(b *B, n *N, dy string) string {
	xi := b.Info(x(n))
	if !xi.Known {
		return b.Fail("LpNormalization needs an input of known rank, has %v", xi)
	}
	axis := n.Int("axis", -1)
	if axis < 0 {
		axis += int64(xi.Rank())
	}
	var norm, g string
	switch p := n.Int("p", 2); p {
	case 2:
		norm, g = b.Sqrt(b.ReduceSum(b.Mul(x(n), x(n)), true, axis)), y(n)
	case 1:
		norm, g = b.ReduceSum(b.Abs(x(n)), true, axis), b.Sign(x(n))
	default:
		return b.Fail("LpNormalization p = %d (ONNX allows 1 and 2)", p)
	}
	zero := b.ScalarLike(dy, 0)
	dot := b.ReduceSum(b.Mul(dy, y(n)), true, axis)
	safe := b.Where(b.Equal(norm, zero), b.ScalarLike(dy, 1), norm)
	return b.Where(b.Equal(norm, zero), zero, b.Div(b.Sub(dy, b.Mul(g, dot)), safe))
}
