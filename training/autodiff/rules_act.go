package autodiff

import "github.com/ortrain/ortrain/training/graph"

// Rules for the activations, trigonometric and hyperbolic functions and
// reductions that models exported from PyTorch use beyond the basic ones
// in rules.go. Where a derivative has a kink, the side PyTorch takes is
// named.

func init() {
	for op, r := range map[string]Rule{
		// LeakyReLU and friends: x > 0 takes the identity's slope, as in PyTorch.
		"LeakyRelu": unary(func(b *B, n *N, dy string) string {
			return b.Where(b.Greater(x(n), b.ScalarLike(dy, 0)), dy, b.Mul(dy, b.ScalarLike(dy, n.Float("alpha", 0.01))))
		}),
		"Elu": unary(func(b *B, n *N, dy string) string {
			// y + α = α·eˣ below zero.
			return b.Where(b.Greater(x(n), b.ScalarLike(dy, 0)), dy, b.Mul(dy, b.Add(y(n), b.ScalarLike(dy, n.Float("alpha", 1)))))
		}),
		"Selu": unary(func(b *B, n *N, dy string) string {
			alpha, gamma := n.Float("alpha", 1.67326319217681884765625), n.Float("gamma", 1.05070102214813232421875)
			return b.Where(b.Greater(x(n), b.ScalarLike(dy, 0)), b.Mul(dy, b.ScalarLike(dy, gamma)),
				b.Mul(dy, b.Add(y(n), b.ScalarLike(dy, gamma*alpha))))
		}),
		"Celu": unary(func(b *B, n *N, dy string) string {
			alpha := n.Float("alpha", 1)
			return b.Where(b.Greater(x(n), b.ScalarLike(dy, 0)), dy, b.Mul(dy, b.Exp(b.Div(x(n), b.ScalarLike(dy, alpha)))))
		}),
		"HardSigmoid": unary(func(b *B, n *N, dy string) string {
			// Slope α strictly inside the linear part, 0 where clamped.
			lin := b.And(b.Greater(y(n), b.ScalarLike(dy, 0)), b.Less(y(n), b.ScalarLike(dy, 1)))
			return b.Where(lin, b.Mul(dy, b.ScalarLike(dy, n.Float("alpha", 0.2))), b.ScalarLike(dy, 0))
		}),
		"HardSwish": unary(func(b *B, n *N, dy string) string {
			// PyTorch: 0 below -3, 1 above 3, x/3 + 1/2 between (ends included).
			xv := x(n)
			mid := b.Add(b.Div(xv, b.ScalarLike(dy, 3)), b.ScalarLike(dy, 0.5))
			s := b.Where(b.Less(xv, b.ScalarLike(dy, -3)), b.ScalarLike(dy, 0),
				b.Where(b.Greater(xv, b.ScalarLike(dy, 3)), b.ScalarLike(dy, 1), mid))
			return b.Mul(dy, s)
		}),
		"Softsign": unary(func(b *B, n *N, dy string) string {
			d := b.Add(b.ScalarLike(dy, 1), b.Abs(x(n)))
			return b.Div(dy, b.Mul(d, d))
		}),
		"ThresholdedRelu": unary(func(b *B, n *N, dy string) string {
			return b.Where(b.Greater(x(n), b.ScalarLike(dy, n.Float("alpha", 1))), dy, b.ScalarLike(dy, 0))
		}),
		"Shrink": unary(func(b *B, n *N, dy string) string {
			l := n.Float("lambd", 0.5)
			out := b.Or(b.Less(x(n), b.ScalarLike(dy, -l)), b.Greater(x(n), b.ScalarLike(dy, l)))
			return b.Where(out, dy, b.ScalarLike(dy, 0))
		}),
		"Mish": unary(func(b *B, n *N, dy string) string {
			// tanh(sp) + x·σ(x)·(1 - tanh²(sp)), sp = softplus(x).
			xv := x(n)
			t := b.Tanh(b.Op("Softplus", []string{xv}))
			return b.Mul(dy, b.Add(t, b.Mul(b.Mul(xv, b.Sigmoid(xv)), b.Sub(b.ScalarLike(dy, 1), b.Mul(t, t)))))
		}),
		"PRelu": func(b *B, n *N, dy []string, need []bool) []string {
			dx := make([]string, 2)
			g := dy[0]
			if g == "" {
				return dx
			}
			xv, slope, z := n.Inputs[0], n.Inputs[1], b.ScalarLike(g, 0)
			pos := b.Greater(xv, z)
			if need[0] {
				dx[0] = b.ReduceSumTo(b.Where(pos, g, b.Mul(g, slope)), xv)
			}
			if need[1] {
				dx[1] = b.ReduceSumTo(b.Where(pos, z, b.Mul(g, xv)), slope)
			}
			return dx
		},

		// Inverse trigonometric and hyperbolic functions.
		"Tan": unary(func(b *B, n *N, dy string) string {
			return b.Mul(dy, b.Add(b.ScalarLike(dy, 1), b.Mul(y(n), y(n))))
		}),
		"Asin": unary(func(b *B, n *N, dy string) string { return b.Div(dy, sqrt1m(b, x(n), dy)) }),
		"Acos": unary(func(b *B, n *N, dy string) string { return b.Neg(b.Div(dy, sqrt1m(b, x(n), dy))) }),
		"Atan": unary(func(b *B, n *N, dy string) string {
			return b.Div(dy, b.Add(b.ScalarLike(dy, 1), b.Mul(x(n), x(n))))
		}),
		"Sinh": unary(func(b *B, n *N, dy string) string { return b.Mul(dy, b.Op("Cosh", []string{x(n)})) }),
		"Cosh": unary(func(b *B, n *N, dy string) string { return b.Mul(dy, b.Op("Sinh", []string{x(n)})) }),
		"Asinh": unary(func(b *B, n *N, dy string) string {
			return b.Div(dy, b.Sqrt(b.Add(b.Mul(x(n), x(n)), b.ScalarLike(dy, 1))))
		}),
		"Acosh": unary(func(b *B, n *N, dy string) string {
			return b.Div(dy, b.Sqrt(b.Sub(b.Mul(x(n), x(n)), b.ScalarLike(dy, 1))))
		}),
		"Atanh": unary(func(b *B, n *N, dy string) string {
			return b.Div(dy, b.Sub(b.ScalarLike(dy, 1), b.Mul(x(n), x(n))))
		}),

		// Mean of several inputs, broadcasting.
		"Mean": func(b *B, n *N, dy []string, need []bool) []string {
			dx := make([]string, len(n.Inputs))
			if dy[0] == "" {
				return dx
			}
			g := b.Div(dy[0], b.ScalarLike(dy[0], float64(len(n.Inputs))))
			for i, in := range n.Inputs {
				if need[i] {
					dx[i] = b.ReduceSumTo(g, in)
				}
			}
			return dx
		},

		// Reductions: dy spread back over the reduced axes, times the
		// derivative of the reduced function.
		"ReduceSumSquare": unary(func(b *B, n *N, dy string) string {
			return b.Mul(spread(b, n, dy), b.Mul(x(n), b.ScalarLike(dy, 2)))
		}),
		"ReduceL1": unary(func(b *B, n *N, dy string) string { return b.Mul(spread(b, n, dy), b.Sign(x(n))) }),
		"ReduceL2": unary(func(b *B, n *N, dy string) string {
			// x / ‖x‖, and 0 where the norm is 0 (PyTorch's subgradient).
			norm := spread(b, n, y(n))
			z := b.ScalarLike(dy, 0)
			return b.Mul(spread(b, n, dy), b.Where(b.Equal(norm, z), z, b.Div(x(n), norm)))
		}),
		"ReduceLogSum": unary(func(b *B, n *N, dy string) string {
			return b.Div(spread(b, n, dy), b.Exp(spread(b, n, y(n))))
		}),
		"ReduceLogSumExp": unary(reduceLogSumExpGrad),
		"GlobalMaxPool":   unary(globalMaxGrad),
		"ReduceProd":      unary(reduceProdGrad),
	} {
		rules[op] = r
	}
}

// reduceLogSumExpGrad: dX = dY·softmax(X) over the reduced axes, dY and Y
// broadcast rather than expanded. Over the last axis alone the softmax is
// one Softmax node, which ONNX Runtime may write over X: a language
// model's loss then holds one vocabulary-sized tensor besides the logits.
func reduceLogSumExpGrad(b *B, n *N, dy string) string {
	axes, ok := b.G.ReduceAxes(n)
	if !ok {
		return b.Fail("axes must be constant and non-empty unless reducing everything")
	}
	yv := y(n)
	if n.Int("keepdims", 1) == 0 && len(axes) > 0 {
		dy, yv = b.Unsqueeze(dy, axes...), b.Unsqueeze(yv, axes...)
	}
	if info := b.Info(x(n)); len(axes) == 1 && info.Known && axes[0] == int64(info.Rank()-1) {
		return b.Mul(b.Softmax(x(n), -1), dy)
	}
	return b.Mul(b.Exp(b.Sub(x(n), yv)), dy)
}

// reduceProdGrad: each element's gradient is the product of the others
// in its slice, as PyTorch computes it: y/x where the slice holds no
// zero, the product of the rest at a slice's only zero, and 0 elsewhere
// (two zeros or more make every such product 0).
func reduceProdGrad(b *B, n *N, dy string) string {
	xv := x(n)
	axes, ok := b.G.ReduceAxes(n)
	if !ok {
		return b.Fail("axes must be constant and non-empty unless reducing everything")
	}
	zero, one := b.ScalarLike(dy, 0), b.ScalarLike(dy, 1)
	isZero := b.Equal(xv, zero)
	keep := func(v string) string { // reduced over axes, kept as size-1 dims
		if len(axes) == 0 {
			return b.ReduceSum(v, true)
		}
		return b.ReduceSum(v, true, axes...)
	}
	nonzero := b.Where(isZero, one, xv)
	var prodRest string
	if len(axes) == 0 {
		prodRest = b.Op("ReduceProd", []string{nonzero}, graph.AInt("keepdims", 1))
	} else if b.G.Opset >= 18 {
		prodRest = b.Op("ReduceProd", []string{nonzero, b.Ints(axes...)}, graph.AInt("keepdims", 1))
	} else {
		prodRest = b.Op("ReduceProd", []string{nonzero}, graph.AInt("keepdims", 1), graph.AInts("axes", axes))
	}
	zeros := keep(b.Cast(isZero, b.Info(dy).DType))
	none := b.Equal(zeros, zero)
	single := b.And(b.Equal(zeros, one), isZero)
	g := b.Where(none, b.Div(b.ExpandLike(prodRest, xv), nonzero), b.Where(single, b.ExpandLike(prodRest, xv), b.ZerosLike(xv)))
	return b.Mul(spread(b, n, dy), g)
}

// sqrt1m is √(1 - x²).
func sqrt1m(b *B, xv, like string) string {
	return b.Sqrt(b.Sub(b.ScalarLike(like, 1), b.Mul(xv, xv)))
}

// spread broadcasts v, shaped as reduction n's output, back to its
// input's shape.
func spread(b *B, n *N, v string) string {
	axes, ok := b.G.ReduceAxes(n)
	if !ok {
		return b.Fail("axes must be constant and non-empty unless reducing everything")
	}
	if n.Int("keepdims", 1) == 0 && len(axes) > 0 {
		v = b.Unsqueeze(v, axes...)
	}
	return b.ExpandLike(v, x(n))
}

// globalMaxGrad sends each channel's dy to its first maximum, as
// PyTorch's adaptive_max_pool (which exports as GlobalMaxPool) does.
func globalMaxGrad(b *B, n *N, dy string) string {
	xv := x(n)
	if b.Info(xv).Rank() < 3 {
		return b.Fail("GlobalMaxPool needs a known rank ≥ 3")
	}
	flat := b.Reshape(xv, b.Ints(0, 0, -1))
	first := b.Op("ArgMax", []string{flat}, graph.AInt("axis", 2), graph.AInt("keepdims", 1))
	g := b.Op("ScatterElements", []string{b.ZerosLike(flat), first, b.Reshape(dy, b.Ints(0, 0, 1))}, graph.AInt("axis", 2))
	return b.ReshapeLike(g, xv)
}

// nllInputGrad is the gradient of NegativeLogLikelihoodLoss (and of the
// NLL inside SoftmaxCrossEntropyLoss) with respect to its input of shape
// [N, C, d...]: -w[t]·g at class t of each position, 0 elsewhere and at
// ignore_index, where g is dy spread over the positions (divided by the
// summed weights of the positions counted, for the mean).
func nllInputGrad(b *B, n *N, dy, input string) string {
	target, weight := n.Inputs[1], n.Input(2)
	xi, ti := b.Info(input), b.Info(target)
	if !xi.Known || xi.Rank() < 2 || xi.Shape[1] < 0 || !ti.Known {
		return b.Fail("%s needs a known rank and a fixed class count (dimension 1 of %s)", n.Op, input)
	}
	classes := xi.Shape[1]
	ids := make([]int64, classes)
	for i := range ids {
		ids[i] = int64(i)
	}
	shape := make([]int64, xi.Rank())
	for i := range shape {
		shape[i] = 1
	}
	shape[1] = classes
	tt := b.Info(target).DType
	t1 := b.Unsqueeze(target, 1)
	onehot := b.Cast(b.Equal(t1, b.Cast(b.Reshape(b.Ints(ids...), b.Ints(shape...)), tt)), xi.DType)
	coef := b.Cast(b.Equal(target, target), xi.DType) // ones shaped as target
	if n.Attr("ignore_index") != nil {
		ignore := b.Cast(b.Ints(n.Int("ignore_index", 0)), tt)
		coef = b.Cast(b.Not(b.Equal(target, ignore)), xi.DType)
		// An ignored position may hold an index outside the classes.
		target = b.Where(b.Equal(target, ignore), b.Cast(b.Ints(0), tt), target)
	}
	if weight != "" {
		coef = b.Mul(coef, b.Op("Gather", []string{weight, target}, graph.AInt("axis", 0)))
	}
	var g string
	switch n.String("reduction", "mean") {
	case "none":
		g = b.Mul(dy, coef)
	case "sum":
		g = b.Mul(b.ExpandLike(dy, coef), coef)
	default: // mean: over the weights of the counted positions
		g = b.Mul(b.ExpandLike(b.Div(dy, b.ReduceSum(coef, false)), coef), coef)
	}
	return b.Neg(b.Mul(b.Unsqueeze(g, 1), onehot))
}

func init() {
	rules["NegativeLogLikelihoodLoss"] = func(b *B, n *N, dy []string, need []bool) []string {
		dx := make([]string, len(n.Inputs))
		if dy[0] == "" {
			return dx
		}
		if len(need) > 2 && need[2] {
			b.Fail("the class weights of %s get no gradient here: make them a constant or freeze them", n.Op)
			return dx
		}
		if need[0] {
			dx[0] = nllInputGrad(b, n, dy[0], n.Inputs[0])
		}
		return dx
	}
	// SoftmaxCrossEntropyLoss is NLL over LogSoftmax(scores, axis 1); its
	// optional second output is that log-probability.
	rules["SoftmaxCrossEntropyLoss"] = func(b *B, n *N, dy []string, need []bool) []string {
		dx := make([]string, len(n.Inputs))
		if len(need) > 2 && need[2] {
			b.Fail("the class weights of %s get no gradient here: make them a constant or freeze them", n.Op)
			return dx
		}
		if !need[0] {
			return dx
		}
		scores := n.Inputs[0]
		logp := n.Output(1)
		if logp == "" {
			logp = b.Op("LogSoftmax", []string{scores}, graph.AInt("axis", 1))
		}
		var dlogp string
		if dy[0] != "" {
			dlogp = nllInputGrad(b, n, dy[0], scores)
		}
		if len(dy) > 1 && dy[1] != "" {
			if dlogp == "" {
				dlogp = dy[1]
			} else {
				dlogp = b.Add(dlogp, dy[1])
			}
		}
		if dlogp == "" {
			return dx
		}
		dx[0] = b.Sub(dlogp, b.Mul(b.Exp(logp), b.ReduceSum(dlogp, true, 1)))
		return dx
	}
}
