package autodiff

import (
	"math"
	"slices"

	"github.com/ortrain/ortrain/training/graph"
)

// B and N shorten the rule signatures below.
type (
	B = graph.Builder
	N = graph.Node
)

// rules is the gradient table: op type -> backward formula. x, y are the
// node's first input and output, dy the output gradient. Where the forward
// broadcast, ReduceSumTo brings the gradient back to the input's shape.
var rules = map[string]Rule{
	"Identity": unary(func(b *B, n *N, dy string) string { return dy }),
	"Neg":      unary(func(b *B, n *N, dy string) string { return b.Neg(dy) }),
	"Abs":      unary(func(b *B, n *N, dy string) string { return b.Mul(dy, b.Sign(x(n))) }),
	"Relu": unary(func(b *B, n *N, dy string) string {
		return b.Where(b.Greater(y(n), b.ScalarLike(dy, 0)), dy, b.ScalarLike(dy, 0))
	}),
	"Exp":     unary(func(b *B, n *N, dy string) string { return b.Mul(dy, y(n)) }),
	"Log":     unary(func(b *B, n *N, dy string) string { return b.Div(dy, x(n)) }),
	"Sqrt":    unary(func(b *B, n *N, dy string) string { return b.Div(dy, b.Mul(y(n), b.ScalarLike(dy, 2))) }),
	"Sigmoid": unary(func(b *B, n *N, dy string) string { return b.Mul(dy, b.Mul(y(n), b.Sub(b.ScalarLike(dy, 1), y(n)))) }),
	"Tanh":    unary(func(b *B, n *N, dy string) string { return b.Mul(dy, b.Sub(b.ScalarLike(dy, 1), b.Mul(y(n), y(n)))) }),
	"Cast":    unary(func(b *B, n *N, dy string) string { return b.Cast(dy, b.Info(x(n)).DType) }),
	"Softmax": unary(func(b *B, n *N, dy string) string {
		return b.Mul(y(n), b.Sub(dy, b.ReduceSum(b.Mul(dy, y(n)), true, n.Int("axis", -1))))
	}),
	"LogSoftmax": unary(func(b *B, n *N, dy string) string {
		return b.Sub(dy, b.Mul(b.Exp(y(n)), b.ReduceSum(dy, true, n.Int("axis", -1))))
	}),
	"Flatten":   unary(func(b *B, n *N, dy string) string { return b.ReshapeLike(dy, x(n)) }),
	"Reshape":   unary(func(b *B, n *N, dy string) string { return b.ReshapeLike(dy, x(n)) }),
	"Squeeze":   unary(func(b *B, n *N, dy string) string { return b.ReshapeLike(dy, x(n)) }),
	"Unsqueeze": unary(func(b *B, n *N, dy string) string { return b.ReshapeLike(dy, x(n)) }),
	"Transpose": unary(func(b *B, n *N, dy string) string {
		perm := n.Ints("perm")
		if perm == nil {
			for i := b.Info(x(n)).Rank() - 1; i >= 0; i-- {
				perm = append(perm, int64(i))
			}
		}
		inv := make([]int64, len(perm))
		for i, p := range perm {
			inv[p] = int64(i)
		}
		return b.Transpose(dy, inv...)
	}),
	"ReduceSum":         unary(reduceGrad(false)),
	"ReduceMean":        unary(reduceGrad(true)),
	"GlobalAveragePool": unary(func(b *B, n *N, dy string) string { return globalAvgGrad(b, n, dy) }),

	"Add": binary(func(b *B, n *N, dy string) (string, string) { return dy, dy }),
	"Sub": binary(func(b *B, n *N, dy string) (string, string) { return dy, b.Neg(dy) }),
	"Mul": binary(func(b *B, n *N, dy string) (string, string) {
		return b.Mul(dy, n.Inputs[1]), b.Mul(dy, n.Inputs[0])
	}),
	"Div": binary(func(b *B, n *N, dy string) (string, string) {
		return b.Div(dy, n.Inputs[1]), b.Neg(b.Mul(dy, b.Div(y(n), n.Inputs[1])))
	}),
	"Pow": binary(func(b *B, n *N, dy string) (string, string) {
		a, e := n.Inputs[0], n.Inputs[1]
		if b.Info(e).DType != b.Info(a).DType {
			e = b.Cast(e, b.Info(a).DType)
		}
		da := b.Mul(dy, b.Mul(e, b.Pow(a, b.Sub(e, b.ScalarLike(a, 1)))))
		return da, b.Mul(dy, b.Mul(y(n), b.Log(a)))
	}),
	"Mod": modGrad,
	"Sum": func(b *B, n *N, dy []string, need []bool) []string {
		dx := make([]string, len(n.Inputs))
		for i, in := range n.Inputs {
			if need[i] && dy[0] != "" {
				dx[i] = b.ReduceSumTo(dy[0], in)
			}
		}
		return dx
	},

	"Erf": unary(func(b *B, n *N, dy string) string {
		return b.Mul(dy, b.Mul(b.ScalarLike(dy, 2/math.Sqrt(math.Pi)), b.Exp(b.Neg(b.Mul(x(n), x(n))))))
	}),
	"Softplus":   unary(func(b *B, n *N, dy string) string { return b.Mul(dy, b.Sigmoid(x(n))) }),
	"Sin":        unary(func(b *B, n *N, dy string) string { return b.Mul(dy, b.Cos(x(n))) }),
	"Cos":        unary(func(b *B, n *N, dy string) string { return b.Neg(b.Mul(dy, b.Sin(x(n)))) }),
	"Reciprocal": unary(func(b *B, n *N, dy string) string { return b.Neg(b.Mul(dy, b.Mul(y(n), y(n)))) }),
	"Gelu":       unary(geluGrad),
	"Expand":     unary(func(b *B, n *N, dy string) string { return b.ReduceSumTo(dy, x(n)) }),
	"Trilu": unary(func(b *B, n *N, dy string) string {
		return b.Op("Trilu", append([]string{dy}, n.Inputs[1:]...), n.Attrs...)
	}),
	"Where":     whereGrad,
	"Clip":      clipGrad,
	"Max":       extremumGrad,
	"Min":       extremumGrad,
	"ReduceMax": unary(reduceExtremumGrad),
	"ReduceMin": unary(reduceExtremumGrad),
	"Dropout":   dropoutGrad,
	"Einsum":    einsumGrad,

	"Gather": gatherGrad,
	"Slice":  unary(sliceGrad),
	"Split":  splitGrad,
	"Pad":    unary(padGrad),

	"LayerNormalization":    layerNormGrad,
	"InstanceNormalization": instanceNormGrad,
	"GroupNormalization":    groupNormGrad,

	"ConvTranspose": convTransposeGrad,
	"Resize":        unary(resizeGrad),

	"MatMul":             matMulGrad,
	"Gemm":               gemmGrad,
	"Concat":             concatGrad,
	"Conv":               convGrad,
	"MaxPool":            maxPoolGrad,
	"AveragePool":        avgPoolGrad,
	"BatchNormalization": batchNormGrad,

	graph.StopGradientDomain + "." + graph.BatchNormTrainingOp: batchNormTrainingGrad,
}

func x(n *N) string { return n.Inputs[0] }
func y(n *N) string { return n.Outputs[0] }

// unary lifts a one-input formula into a Rule.
func unary(f func(b *B, n *N, dy string) string) Rule {
	return func(b *B, n *N, dy []string, need []bool) []string {
		dx := make([]string, len(n.Inputs))
		if need[0] && dy[0] != "" {
			dx[0] = f(b, n, dy[0])
		}
		return dx
	}
}

// binary lifts a broadcasting two-input formula into a Rule; each result is
// summed back to its input's shape. Only wanted gradients are kept, and the
// builder's unused nodes are pruned when the graph is finished.
func binary(f func(b *B, n *N, dy string) (string, string)) Rule {
	return func(b *B, n *N, dy []string, need []bool) []string {
		dx := make([]string, len(n.Inputs))
		if dy[0] == "" {
			return dx
		}
		da, db := f(b, n, dy[0])
		if need[0] {
			dx[0] = b.ReduceSumTo(da, n.Inputs[0])
		}
		if need[1] {
			dx[1] = b.ReduceSumTo(db, n.Inputs[1])
		}
		return dx
	}
}

// modGrad differentiates Mod with fmod=1, C's fmod and the only form ONNX
// allows on floats (torch.fmod): Y = A - trunc(A/B)·B, so dY/dA = 1 and
// dY/dB = -trunc(A/B), taken as Round((A - Y)/B) so that the quotient is
// the one the forward truncated to. Integer Mod carries no gradient (its
// output is an integer).
func modGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	if dy[0] == "" {
		return dx
	}
	if n.Int("fmod", 0) != 1 {
		b.Fail("Mod on floats must have fmod=1 (ONNX allows no other)")
		return dx
	}
	a, d := n.Inputs[0], n.Inputs[1]
	if need[0] {
		dx[0] = b.ReduceSumTo(dy[0], a)
	}
	if need[1] {
		q := b.Op("Round", []string{b.Div(b.Sub(a, y(n)), d)})
		dx[1] = b.ReduceSumTo(b.Neg(b.Mul(dy[0], q)), d)
	}
	return dx
}

// reduceGrad spreads dy back over the reduced axes (dividing by their size
// for a mean).
func reduceGrad(mean bool) func(b *B, n *N, dy string) string {
	return func(b *B, n *N, dy string) string {
		axes, ok := b.G.ReduceAxes(n)
		if !ok {
			return b.Fail("axes must be constant and non-empty unless reducing everything")
		}
		xi := b.Info(x(n))
		if n.Int("keepdims", 1) == 0 && len(axes) > 0 {
			dy = b.Unsqueeze(dy, axes...)
		}
		g := b.ExpandLike(dy, x(n))
		if mean {
			g = b.Div(g, b.Numel(x(n), xi.DType, axes...))
		}
		return g
	}
}

func globalAvgGrad(b *B, n *N, dy string) string {
	xi := b.Info(x(n))
	var sp []int64
	for i := 2; i < xi.Rank(); i++ {
		sp = append(sp, int64(i))
	}
	return b.Div(b.ExpandLike(dy, x(n)), b.Numel(x(n), xi.DType, sp...))
}

// matMulGrad handles numpy matmul with broadcast batch axes and 1-D operands
// (a 1-D left operand is a row, a 1-D right operand a column, squeezed away
// in the product).
func matMulGrad(b *B, n *N, dy []string, need []bool) []string {
	a, w, g := n.Inputs[0], n.Inputs[1], dy[0]
	dx := make([]string, 2)
	if g == "" {
		return dx
	}
	ra, rw := b.Info(a).Rank(), b.Info(w).Rank()
	if ra < 1 || rw < 1 {
		b.Fail("MatMul operand ranks unknown")
		return dx
	}
	switch {
	case ra == 1 && rw == 1:
		dx[0], dx[1] = b.Mul(g, w), b.Mul(g, a)
	case ra == 1:
		g2 := b.Unsqueeze(g, -2) // (..., 1, n)
		if need[0] {
			dx[0] = b.ReduceSumTo(b.MatMul(g2, b.SwapLast(w)), a)
		}
		if need[1] {
			dx[1] = b.ReduceSumTo(b.MatMul(b.Unsqueeze(a, 1), g2), w)
		}
	case rw == 1:
		g2 := b.Unsqueeze(g, -1) // (..., m, 1)
		if need[0] {
			dx[0] = b.ReduceSumTo(b.MatMul(g2, b.Unsqueeze(w, 0)), a)
		}
		if need[1] {
			dx[1] = b.ReduceSumTo(b.Squeeze(b.MatMul(b.SwapLast(a), g2), -1), w)
		}
	default:
		if need[0] {
			dx[0] = b.ReduceSumTo(b.MatMul(g, b.SwapLast(w)), a)
		}
		if need[1] {
			dx[1] = sharedWeightGrad(b, a, w, g)
			if dx[1] == "" {
				dx[1] = b.ReduceSumTo(b.MatMul(b.SwapLast(a), g), w)
			}
		}
	}
	return dx
}

// sharedWeightGrad is the gradient of a 2-D weight w that a batched MatMul
// (a of rank ≥ 3, a linear layer over [B, L, k]) shares across the batch:
// one Gemm over the flattened rows, aᵀ·g of [B·L, k] by [B·L, n]. The
// batched product would materialise a [B, k, n] gradient per sample before
// summing it, and a transposed copy of a. "" when the sizes are unknown.
func sharedWeightGrad(b *B, a, w, g string) string {
	wi := b.Info(w)
	if wi.Rank() != 2 || b.Info(a).Rank() < 3 || !wi.Static() {
		return ""
	}
	k, n := wi.Shape[0], wi.Shape[1]
	return b.Op("Gemm", []string{b.Reshape(a, b.Ints(-1, k)), b.Reshape(g, b.Ints(-1, n))}, graph.AInt("transA", 1))
}

// gemmGrad: Y = alpha op(A) op(B) + beta C; the products are Gemms again,
// with the transposes folded into their flags.
func gemmGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	g := dy[0]
	if g == "" {
		return dx
	}
	a, w := n.Inputs[0], n.Inputs[1]
	ta, tb, alpha := n.Int("transA", 0), n.Int("transB", 0), n.Float("alpha", 1)
	gemm := func(p, q string, tp, tq int64) string {
		return b.Op("Gemm", []string{p, q}, graph.AInt("transA", tp), graph.AInt("transB", tq), graph.AFloat("alpha", alpha))
	}
	if need[0] {
		if ta == 0 {
			dx[0] = gemm(g, w, 0, 1-tb)
		} else {
			dx[0] = gemm(w, g, tb, 1)
		}
	}
	if need[1] {
		if tb == 0 {
			dx[1] = gemm(a, g, 1-ta, 0)
		} else {
			dx[1] = gemm(g, a, 1, ta)
		}
	}
	if len(need) > 2 && need[2] {
		gc := g
		if beta := n.Float("beta", 1); beta != 1 {
			gc = b.Mul(g, b.ScalarLike(g, beta))
		}
		dx[2] = b.ReduceSumTo(gc, n.Inputs[2])
	}
	return dx
}

// concatGrad splits dy back into the inputs' extents along the axis.
func concatGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	if dy[0] == "" {
		return dx
	}
	r := b.Info(y(n)).Rank()
	ax := n.Int("axis", 0)
	if ax < 0 {
		ax += int64(r)
	}
	var sizes []int64
	static := true
	for _, in := range n.Inputs {
		s := b.Info(in).Shape
		if len(s) <= int(ax) || s[ax] < 0 {
			static = false
			break
		}
		sizes = append(sizes, s[ax])
	}
	var split string
	if static {
		split = b.Ints(sizes...)
	} else {
		var parts []string
		for _, in := range n.Inputs {
			parts = append(parts, b.Op("Gather", []string{b.Shape(in), b.Ints(ax)}, graph.AInt("axis", 0)))
		}
		split = b.Op("Concat", parts, graph.AInt("axis", 0))
	}
	outs := b.OpN("Split", []string{dy[0], split}, len(n.Inputs), graph.AInt("axis", ax))
	for i := range dx {
		if need[i] {
			dx[i] = outs[i]
		}
	}
	return dx
}

// spatialAxes lists the axes after batch and channel of a rank-r tensor.
func spatialAxes(r int) []int64 {
	var s []int64
	for i := 2; i < r; i++ {
		s = append(s, int64(i))
	}
	return s
}

// staticSpatial returns the window attributes with auto_pad resolved and the
// input and output spatial sizes, failing unless they are static.
func staticSpatial(b *B, n *N) (w graph.WindowAttrs, in, out []int64, ok bool) {
	xi, yi := b.Info(x(n)), b.Info(y(n))
	if !xi.Known || !yi.Known || slices.Contains(xi.Shape[2:], -1) || slices.Contains(yi.Shape[2:], -1) {
		b.Fail("%s needs static spatial sizes to build its gradient, has input %v and output %v", n.Op, xi, yi)
		return w, nil, nil, false
	}
	w = graph.Window(b.G, n)
	in, out = xi.Shape[2:], yi.Shape[2:]
	if !w.ResolvePads(in) {
		b.Fail("cannot resolve auto_pad")
		return w, nil, nil, false
	}
	return w, in, out, true
}

// outputPadding is what ConvTranspose must add so that its output, read back
// through the forward window, has exactly the input's spatial sizes.
func outputPadding(w graph.WindowAttrs, in, out []int64) []int64 {
	k := len(in)
	op := make([]int64, k)
	for i := range op {
		full := w.Strides[i]*(out[i]-1) + (w.Kernel[i]-1)*w.Dilations[i] + 1 - w.Pads[i] - w.Pads[k+i]
		op[i] = in[i] - full
	}
	return op
}

func windowAttrs(w graph.WindowAttrs, group int64, outPad []int64) []*graph.Attr {
	return []*graph.Attr{
		graph.AInts("strides", w.Strides), graph.AInts("pads", w.Pads), graph.AInts("dilations", w.Dilations),
		graph.AInt("group", group), graph.AInts("output_padding", outPad),
	}
}
