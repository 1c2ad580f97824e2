package autodiff

import (
	"math"
	"strings"

	"github.com/ortrain/ortrain/training/graph"
)

// geluGrad differentiates GELU (opset 20) in both forms: exact,
// Φ(x) + x·φ(x), in geluChainGrad's seven passes after u and A; tanh, with t = tanh(k(x + 0.044715x³)) and k = √(2/π),
// 0.5(1+t) + 0.5x(1-t²)k(1 + 3·0.044715x²).
func geluGrad(b *B, n *N, dy string) string {
	xv := x(n)
	c := func(v float64) string { return b.ScalarLike(dy, v) }
	if n.String("approximate", "none") == "tanh" {
		k, x2 := math.Sqrt(2/math.Pi), b.Mul(xv, xv)
		t := b.Tanh(b.Mul(c(k), b.Mul(xv, b.Add(c(1), b.Mul(c(0.044715), x2)))))
		left := b.Mul(c(0.5), b.Add(c(1), t))
		right := b.Mul(b.Mul(c(0.5*k), xv), b.Mul(b.Sub(c(1), b.Mul(t, t)), b.Add(c(1), b.Mul(c(3*0.044715), x2))))
		return b.Mul(dy, b.Add(left, right))
	}
	// As the elementary chain's: u = x/√2, A = 1 + erf(u), h = ½.
	u := b.Mul(xv, c(1/math.Sqrt2))
	return geluChainGrad(b, geluChain{x: xv, u: u, a: b.Add(c(1), b.Erf(u)), h: 0.5, k: 1 / math.Sqrt2}, dy)
}

// whereGrad routes dY to the branch the condition picked; attention masks
// written as Where(mask, scores, -inf) reach the scores this way.
func whereGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	if dy[0] == "" {
		return dx
	}
	c, z := n.Inputs[0], b.ScalarLike(dy[0], 0)
	if need[1] {
		dx[1] = b.ReduceSumTo(b.Where(c, dy[0], z), n.Inputs[1])
	}
	if need[2] {
		dx[2] = b.ReduceSumTo(b.Where(c, z, dy[0]), n.Inputs[2])
	}
	return dx
}

// clipGrad passes dY where lo <= x <= hi (PyTorch's clamp does the same at
// the bounds); a bound gets the gradient where it was the output.
func clipGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	g := dy[0]
	if g == "" {
		return dx
	}
	xv, z := x(n), b.ScalarLike(g, 0)
	lo, hi := n.Input(1), n.Input(2)
	pass := ""
	for _, m := range []string{cond(lo != "", func() string { return b.Op("GreaterOrEqual", []string{xv, lo}) }),
		cond(hi != "", func() string { return b.Op("LessOrEqual", []string{xv, hi}) })} {
		switch {
		case m == "":
		case pass == "":
			pass = m
		default:
			pass = b.And(pass, m)
		}
	}
	if need[0] {
		dx[0] = g
		if pass != "" {
			dx[0] = b.Where(pass, g, z)
		}
	}
	if lo != "" && need[1] {
		dx[1] = b.ReduceSumTo(b.Where(b.Less(xv, lo), g, z), lo)
	}
	if hi != "" && need[2] {
		dx[2] = b.ReduceSumTo(b.Where(b.Greater(xv, hi), g, z), hi)
	}
	return dx
}

func cond(ok bool, f func() string) string {
	if ok {
		return f()
	}
	return ""
}

// extremumGrad (Max, Min over broadcast inputs) gives dY to the input that
// equals the output; a tie goes to the first such input, so the gradients
// still sum to dY.
func extremumGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	g := dy[0]
	if g == "" {
		return dx
	}
	z := b.ScalarLike(g, 0)
	taken := ""
	for i, in := range n.Inputs {
		hit := b.Equal(in, y(n))
		if taken != "" {
			hit = b.And(hit, b.Not(taken))
		}
		if need[i] {
			dx[i] = b.ReduceSumTo(b.Where(hit, g, z), in)
		}
		if taken == "" {
			taken = hit
		} else {
			taken = b.Op("Or", []string{taken, hit})
		}
	}
	return dx
}

// reduceExtremumGrad (ReduceMax, ReduceMin) sends dY to the entries equal
// to the result, shared equally between ties as PyTorch's amax does.
func reduceExtremumGrad(b *B, n *N, dy string) string {
	axes, ok := b.G.ReduceAxes(n)
	if !ok {
		return b.Fail("axes must be constant")
	}
	yv := y(n)
	if n.Int("keepdims", 1) == 0 && len(axes) > 0 {
		dy, yv = b.Unsqueeze(dy, axes...), b.Unsqueeze(yv, axes...)
	}
	hit := b.Cast(b.Equal(x(n), yv), b.Info(x(n)).DType)
	return b.Mul(b.Div(hit, b.ReduceSum(hit, true, axes...)), dy)
}

// dropoutGrad reuses the forward's mask (asking the node for it when the
// model did not), so the backward drops exactly what the forward dropped:
// dX = dY·mask/(1-ratio). Without training_mode, Dropout is the identity.
func dropoutGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	if !need[0] || dy[0] == "" {
		return dx
	}
	train := n.Input(2)
	flag, isConst := constBool(b.G, train)
	if train == "" || isConst && !flag {
		dx[0] = dy[0]
		return dx
	}
	mask := n.Output(1)
	if mask == "" {
		mask = b.G.AddOutput(n, y(n)+"_mask")
	}
	dt := b.Info(x(n)).DType
	var scale string
	ratio := n.Input(1)
	if t, ok := b.G.Const(ratio); ratio == "" || ok {
		r := 0.5
		if ok {
			v, err := graph.FloatData(t)
			if err != nil || len(v) != 1 {
				return []string{b.Fail("Dropout ratio must be a float scalar")}
			}
			r = v[0]
		}
		scale = b.ScalarLike(dy[0], 1/(1-r))
	} else {
		one := b.ScalarLike(dy[0], 1)
		scale = b.Div(one, b.Sub(one, b.Cast(ratio, dt)))
	}
	g := b.Mul(b.Mul(dy[0], b.Cast(mask, dt)), scale)
	if !isConst {
		g = b.Where(train, g, dy[0])
	}
	dx[0] = g
	return dx
}

func constBool(g *graph.Graph, v string) (value, ok bool) {
	t, ok := g.Const(v)
	if !ok {
		return false, false
	}
	raw, err := graph.RawBytes(t)
	if err != nil || len(raw) != 1 {
		return false, false
	}
	return raw[0] != 0, true
}

// einsumGrad: the gradient of operand i is the einsum of dY with the other
// operands onto i's labels; labels summed in operand i alone come back by
// broadcasting. Equations with ellipses or a label repeated in one operand
// (diagonals) are refused.
func einsumGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	if dy[0] == "" {
		return dx
	}
	ops, out, ok := graph.ParseEinsum(n.String("equation", ""))
	if !ok {
		b.Fail("Einsum %q: equations with ellipses have no gradient rule", n.String("equation", ""))
		return dx
	}
	for i := range ops {
		if !need[i] {
			continue
		}
		terms, inputs := []string{out}, []string{dy[0]}
		for j := range ops {
			if j != i {
				terms, inputs = append(terms, ops[j]), append(inputs, n.Inputs[j])
			}
		}
		have := strings.Join(terms, "")
		keep := ""
		var missing []int64
		for k, l := range ops[i] {
			if strings.Count(ops[i], string(l)) > 1 {
				b.Fail("Einsum %q: a label repeated in one operand has no gradient rule", n.String("equation", ""))
				return dx
			}
			if strings.ContainsRune(have, l) {
				keep += string(l)
			} else {
				missing = append(missing, int64(k))
			}
		}
		gi := b.Einsum(strings.Join(terms, ",")+"->"+keep, inputs...)
		if len(missing) > 0 {
			gi = b.ExpandLike(b.Unsqueeze(gi, missing...), n.Inputs[i])
		}
		dx[i] = b.ReduceSumTo(gi, n.Inputs[i])
	}
	return dx
}
