package autodiff

import (
	"slices"

	"github.com/ortrain/ortrain/training/graph"
)

// convGrad: dX is the transposed convolution of dY with the same window;
// dW is a convolution of X by dY with batch and channel axes swapped, so
// that the sum over the batch becomes the sum over input channels, and with
// strides and dilations trading places; dB sums dY over all but channels.
func convGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	g := dy[0]
	if g == "" {
		return dx
	}
	w, in, out, ok := staticSpatial(b, n)
	if !ok {
		return dx
	}
	group := n.Int("group", 1)
	if need[0] {
		dx[0] = b.Op("ConvTranspose", []string{g, n.Inputs[1]}, windowAttrs(w, group, outputPadding(w, in, out))...)
	}
	if need[1] {
		dx[1] = convWeightGrad(b, x(n), g, n.Inputs[1], w, in, out, group)
	}
	if len(need) > 2 && need[2] {
		dx[2] = b.ReduceSum(g, false, append([]int64{0}, spatialAxes(len(in)+2)...)...)
	}
	return dx
}

// convWeightGrad is the weight gradient of the convolution of xv (spatial
// sizes in) by weight wv with window w, given the gradient g of its output
// (spatial sizes out).
func convWeightGrad(b *B, xv, g, wv string, w graph.WindowAttrs, in, out []int64, group int64) string {
	xi, wi := b.Info(xv), b.Info(wv)
	if !wi.Static() || xi.Shape[1] < 0 {
		return b.Fail("Conv weight %v and input channels %v must be static", wi, xi)
	}
	r := len(in) + 2
	swap := []int64{1, 0}
	for i := 2; i < r; i++ {
		swap = append(swap, int64(i))
	}
	var xt, gt string
	if group == 1 {
		xt, gt = b.Transpose(xv, swap...), b.Transpose(g, swap...)
	} else {
		// Channels c of group k pair with images as channels k*N+n, so the
		// convolution's own groups keep the groups apart.
		cg, m := xi.Shape[1]/group, wi.Shape[0]
		perm := func(first ...int64) []int64 {
			for i := 3; i < r+1; i++ {
				first = append(first, int64(i))
			}
			return first
		}
		xr := b.Reshape(xv, b.Ints(append([]int64{-1, group, cg}, in...)...))
		xt = b.Reshape(b.Transpose(xr, perm(2, 1, 0)...), b.Ints(append([]int64{cg, -1}, in...)...))
		gr := b.Reshape(g, b.Ints(append([]int64{-1, group, m / group}, out...)...))
		gt = b.Reshape(b.Transpose(gr, perm(1, 2, 0)...), b.Ints(append([]int64{m, -1}, out...)...))
	}
	full := b.Op("Conv", []string{xt, gt}, graph.AInts("strides", w.Dilations), graph.AInts("dilations", w.Strides),
		graph.AInts("pads", w.Pads), graph.AInt("group", group))
	k := wi.Shape[2:]
	zeros := make([]int64, len(k))
	full = b.Op("Slice", []string{full, b.Ints(zeros...), b.Ints(k...), b.Ints(spatialAxes(r)...)})
	return b.Transpose(full, swap...)
}

// convTransposeGrad: ConvTranspose is the adjoint of the Conv with the
// same window and weight, mapping its output space back to its input space;
// so dX is that Conv applied to dY, and dW is that Conv's weight gradient
// with dY as its input and X as its output gradient.
func convTransposeGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	g := dy[0]
	if g == "" {
		return dx
	}
	if n.String("auto_pad", "NOTSET") != "NOTSET" || n.Ints("output_shape") != nil {
		b.Fail("ConvTranspose with auto_pad or output_shape has no gradient rule; export with explicit pads and output_padding (PyTorch does)")
		return dx
	}
	w, in, out, ok := staticSpatial(b, n)
	if !ok {
		return dx
	}
	group := n.Int("group", 1)
	if need[0] {
		dx[0] = b.Op("Conv", []string{g, n.Inputs[1]}, graph.AInts("strides", w.Strides), graph.AInts("pads", w.Pads),
			graph.AInts("dilations", w.Dilations), graph.AInt("group", group))
		if gi := b.Info(dx[0]); !slices.Equal(gi.Shape[2:], in) {
			b.Fail("ConvTranspose output_padding as large as the stride has no gradient rule")
		}
	}
	if need[1] {
		dx[1] = convWeightGrad(b, g, x(n), n.Inputs[1], w, out, in, group)
	}
	if len(need) > 2 && need[2] {
		dx[2] = b.ReduceSum(g, false, append([]int64{0}, spatialAxes(len(in)+2)...)...)
	}
	return dx
}

// maxPoolGrad routes dY to the positions MaxPool picked, which it reports
// in its Indices output as offsets into the flattened input; overlapping
// windows that pick the same element add up.
func maxPoolGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, 1)
	if dy[0] == "" || !need[0] {
		return dx
	}
	if n.Int("storage_order", 0) != 0 {
		b.Fail("MaxPool with storage_order=1 is not supported")
		return dx
	}
	idx := n.Output(1)
	if idx == "" {
		idx = b.G.AddOutput(n, y(n)+"_indices")
	}
	flat := b.Ints(-1)
	z := b.ZerosLike(b.Reshape(x(n), flat))
	s := b.Op("ScatterElements", []string{z, b.Reshape(idx, flat), b.Reshape(dy[0], flat)},
		graph.AInt("axis", 0), graph.AString("reduction", "add"))
	dx[0] = b.ReshapeLike(s, x(n))
	return dx
}

// avgPoolGrad spreads dY / count over each window: a transposed depthwise
// convolution with a kernel of ones, the counts being those ONNX Runtime
// divides by (the window clipped to the padded or the real input).
func avgPoolGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, 1)
	if dy[0] == "" || !need[0] {
		return dx
	}
	w, in, out, ok := staticSpatial(b, n)
	if !ok {
		return dx
	}
	xi := b.Info(x(n))
	c := xi.Shape[1]
	if c < 0 || slices.ContainsFunc(w.Dilations, func(d int64) bool { return d != 1 }) {
		b.Fail("AveragePool gradient needs static channels and no dilation")
		return dx
	}
	op := outputPadding(w, in, out)
	if slices.ContainsFunc(op, func(p int64) bool { return p < 0 }) {
		b.Fail("AveragePool with ceil_mode windows past the padded input is not supported")
		return dx
	}
	include := n.Int("count_include_pad", 0) == 1
	k := len(in)
	per := make([][]float64, k) // per-axis window sizes; the count is their product
	for i := 0; i < k; i++ {
		for o := int64(0); o < out[i]; o++ {
			lo := o*w.Strides[i] - w.Pads[i]
			hi := min(lo+w.Kernel[i], in[i]+w.Pads[k+i])
			if !include {
				lo, hi = max(lo, 0), min(hi, in[i])
			}
			per[i] = append(per[i], 1/float64(hi-lo))
		}
	}
	inv := []float64{1}
	for i := 0; i < k; i++ {
		var next []float64
		for _, a := range inv {
			for _, p := range per[i] {
				next = append(next, a*p)
			}
		}
		inv = next
	}
	dt := xi.DType
	invT, err := graph.Floats("", dt, append([]int64{1, 1}, out...), inv)
	if err != nil {
		b.Fail("%v", err)
		return dx
	}
	ones := make([]float64, c*numel(w.Kernel))
	for i := range ones {
		ones[i] = 1
	}
	kern, _ := graph.Floats("", dt, append([]int64{c, 1}, w.Kernel...), ones)
	g := b.Mul(dy[0], b.Const(invT))
	dx[0] = b.Op("ConvTranspose", []string{g, b.Const(kern)}, windowAttrs(w, c, op)...)
	return dx
}

// batchNormGrad differentiates BatchNormalization in inference mode, where
// the mean and variance are constants (frozen statistics). Training-mode
// nodes are rewritten into elementary ops by TrainingBatchNorm beforehand.
func batchNormGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	if dy[0] == "" {
		return dx
	}
	if n.Int("training_mode", 0) == 1 || len(n.Outputs) > 1 {
		b.Fail("training-mode BatchNormalization must be expanded by autodiff.TrainingBatchNorm first")
		return dx
	}
	r := b.Info(x(n)).Rank()
	bc := append([]int64{0}, spatialAxes(r)...)
	u := func(v string) string { return b.Unsqueeze(v, bc...) }
	invstd := b.Div(b.ScalarLike(dy[0], 1), b.Sqrt(b.Add(u(n.Inputs[4]), b.ScalarLike(dy[0], n.Float("epsilon", 1e-5)))))
	if need[0] {
		dx[0] = b.Mul(dy[0], b.Mul(u(n.Inputs[1]), invstd))
	}
	if need[1] {
		xhat := b.Mul(b.Sub(x(n), u(n.Inputs[3])), invstd)
		dx[1] = b.ReduceSum(b.Mul(dy[0], xhat), false, bc...)
	}
	if need[2] {
		dx[2] = b.ReduceSum(dy[0], false, bc...)
	}
	return dx
}

// BufferUpdate pairs a buffer input (a running statistic) with the value
// holding its new contents after a training step.
type BufferUpdate struct {
	Buffer, Out string
}

// TrainingBatchNorm rewrites every BatchNormalization node into elementary
// ops computing it in training mode: normalising with the batch's mean and
// (biased) variance, and updating the running statistics as
// running*momentum + batch*(1-momentum), with the variance unbiased as
// PyTorch does, since the models and recipes ortrain trains come from
// PyTorch. Differentiating the elementary ops gives the exact batch-norm
// gradient, mean and variance paths included, without a dedicated kernel
// (stock ONNX Runtime has no training-mode BatchNormalization gradient).
// outName names the value each running statistic's update is written to.
func TrainingBatchNorm(g *graph.Graph, outName func(buffer string) string) ([]BufferUpdate, error) {
	var ups []BufferUpdate
	seen := map[string]bool{}
	var bns []*graph.Node
	g.Nodes = slices.DeleteFunc(g.Nodes, func(n *graph.Node) bool {
		if n.Op == "BatchNormalization" && n.Domain == "" {
			bns = append(bns, n)
			return true
		}
		return false
	})
	for _, n := range bns {
		b := graph.NewBuilder(g, n.Name+"/")
		xi := g.Info(x(n))
		if !xi.Known || xi.Rank() < 2 {
			return nil, graph.Errorf("BatchNormalization %q: input rank unknown", n.Name)
		}
		axes := append([]int64{0}, spatialAxes(xi.Rank())...)
		u := func(v string) string { return b.Unsqueeze(v, axes...) }
		dt := xi.DType
		mean := b.ReduceMean(x(n), true, axes...)
		d := b.Sub(x(n), mean)
		v := b.ReduceMean(b.Mul(d, d), true, axes...)
		invstd := b.Div(b.Scalar(dt, 1), b.Sqrt(b.Add(v, b.Scalar(dt, n.Float("epsilon", 1e-5)))))
		b.OpInto(y(n), "Add", []string{b.Mul(b.Mul(d, invstd), u(n.Inputs[1])), u(n.Inputs[2])})

		mom := n.Float("momentum", 0.9)
		cnt := b.Numel(x(n), dt, axes...)
		unbiased := b.Mul(v, b.Div(cnt, b.Sub(cnt, b.Scalar(dt, 1))))
		for i, stat := range []string{mean, unbiased} {
			buf := n.Inputs[3+i]
			if seen[buf] {
				return nil, graph.Errorf("running statistic %q feeds two BatchNormalization nodes", buf)
			}
			seen[buf] = true
			flat := b.Reshape(stat, b.Ints(-1))
			out := b.OpInto(outName(buf), "Add", []string{b.Mul(buf, b.Scalar(dt, mom)), b.Mul(flat, b.Scalar(dt, 1-mom))})
			ups = append(ups, BufferUpdate{Buffer: buf, Out: out})
		}
		if b.Err != nil {
			return nil, b.Err
		}
	}
	return ups, g.Sort()
}
