package autodiff

import (
	"math"
	"slices"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// geluChain is the exact GELU as exporters write it in elementary ops,
// m = h·x·A with A = c + erf(u), u = k·x (x/√2 as a Div by √2 or a Mul by
// 1/√2; h = ½ and c = 1 in GELU, any constants here), either as
// Mul(Mul(x, h), A) or as Mul(Mul(x, A), h), with the operands of each
// product in either order; or Mul(x, A), h = 1, where graph.SinkScales
// moved GELU's ½ onto the weight of the product after it.
type geluChain struct {
	x, u, a string  // the input, the erf's argument, A
	h, k, c float64 // the outer scale, x's factor in u, and A's constant
}

// geluPattern matches the chain ending at n, each inner value read by the
// next op of the chain alone. Differentiated op by op it takes ten
// element-wise passes over the MLP's widest activation; geluChainGrad
// writes its derivative in seven.
func geluPattern(g *graph.Graph, n *graph.Node, prod map[string]*graph.Node, readers map[string]int, outputs map[string]bool) (geluChain, bool) {
	var none geluChain
	if n.Op != "Mul" || n.Domain != "" || len(n.Inputs) != 2 {
		return none, false
	}
	inner := func(v, op string) *graph.Node {
		p := prod[v]
		if p == nil || p.Op != op || p.Domain != "" || len(p.Inputs) != 2 || readers[v] != 1 || outputs[v] {
			return nil
		}
		return p
	}
	scalar := func(v string) (float64, bool) { return scalarValue(g, prod, v) }
	// erfSum matches A = c + erf(u), u = k·x, returning x, u, k and c.
	erfSum := func(av string) (x, u string, k, c float64, ok bool) {
		add := inner(av, "Add")
		if add == nil {
			return "", "", 0, 0, false
		}
		for i := range 2 {
			erf := prod[add.Inputs[i]]
			c, isConst := scalar(add.Inputs[1-i])
			if !isConst || erf == nil || erf.Op != "Erf" || erf.Domain != "" || readers[add.Inputs[i]] != 1 || outputs[add.Inputs[i]] {
				continue
			}
			u = erf.Inputs[0]
			if readers[u] != 1 || outputs[u] {
				return "", "", 0, 0, false
			}
			if p := inner(u, "Div"); p != nil {
				if d, ok := scalar(p.Inputs[1]); ok && d != 0 {
					return p.Inputs[0], u, 1 / d, c, true
				}
			}
			if p := inner(u, "Mul"); p != nil {
				for j := range 2 {
					if f, ok := scalar(p.Inputs[j]); ok {
						return p.Inputs[1-j], u, f, c, true
					}
				}
			}
		}
		return "", "", 0, 0, false
	}
	for i := range 2 {
		left, right := n.Inputs[i], n.Inputs[1-i]
		// Mul(Mul(x, h), A): right is A, left the scaled x.
		if p := inner(left, "Mul"); p != nil {
			if x, u, k, c, ok := erfSum(right); ok {
				for j := range 2 {
					if h, isConst := scalar(p.Inputs[j]); isConst && p.Inputs[1-j] == x {
						return geluChain{x: x, u: u, a: right, h: h, k: k, c: c}, true
					}
				}
			}
		}
		// Mul(Mul(x, A), h): right is h.
		if h, isConst := scalar(right); isConst {
			if p := inner(left, "Mul"); p != nil {
				for j := range 2 {
					if x, u, k, c, ok := erfSum(p.Inputs[j]); ok && p.Inputs[1-j] == x {
						return geluChain{x: x, u: u, a: p.Inputs[j], h: h, k: k, c: c}, true
					}
				}
			}
		}
	}
	// Mul(x, A): no scale.
	for i := range 2 {
		if x, u, k, c, ok := erfSum(n.Inputs[i]); ok && n.Inputs[1-i] == x {
			return geluChain{x: x, u: u, a: n.Inputs[i], h: 1, k: k, c: c}, true
		}
	}
	return none, false
}

// exact reports whether the chain is GELU itself, ½·x·(1 + erf(x/√2)),
// to float32's rounding of its constants (exporters divide by √2 rounded
// to float32).
func (c geluChain) exact() bool {
	return c.h == 0.5 && c.c == 1 && math.Abs(c.k*math.Sqrt2-1) < 1e-6
}

// FuseGelus writes each exact GELU in elementary ops (as PyTorch exports
// it before opset 20) as one ONNX Runtime Gelu node (com.microsoft, the
// same function) where can says the device runs that node: the forward
// pass then makes one element-wise pass over the MLP's widest activation
// where it made four. ONNX Runtime's own GeluFusion does not: it takes
// neither bfloat16 nor the chain once graph.SinkScales has moved its ½
// onto the next weight, so this runs before SinkScales. Not the ai.onnx
// Gelu: it needs opset 20, which a CUDA build does not write
// (graph.CUDAOpset). The gradient is the chain's (geluGrad). It returns
// the number fused.
func FuseGelus(g *graph.Graph, can func(n *graph.Node) bool) int {
	prod := g.Producers()
	readers, outputs := readerCounts(g)
	fused := 0
	drop := map[*graph.Node]bool{}
	_, had := g.Domains[graph.MSDomain]
	g.Domains[graph.MSDomain] = 1 // for can, which may build a session of the node
	for _, n := range g.Nodes {
		c, ok := geluPattern(g, n, prod, readers, outputs)
		if !ok || !c.exact() || !g.Info(c.x).Float() {
			continue
		}
		gelu := &graph.Node{Op: "Gelu", Domain: graph.MSDomain, Name: n.Name, Inputs: []string{c.x}, Outputs: n.Outputs}
		if !can(gelu) {
			continue
		}
		// The chain's other nodes: producers of the values between x and
		// n's output, each read by the chain alone (geluPattern checked).
		var walk func(v string)
		walk = func(v string) {
			p := prod[v]
			if v == c.x || p == nil || p.Domain != "" || !geluChainOps[p.Op] || readers[v] != 1 || outputs[v] {
				return
			}
			drop[p] = true
			for _, in := range p.Inputs {
				walk(in)
			}
		}
		for _, in := range n.Inputs {
			walk(in)
		}
		*n = *gelu
		fused++
	}
	if fused == 0 && !had {
		delete(g.Domains, graph.MSDomain)
	}
	g.Nodes = slices.DeleteFunc(g.Nodes, func(n *graph.Node) bool { return drop[n] })
	return fused
}

// geluChainOps are the ops of the elementary GELU.
var geluChainOps = map[string]bool{"Mul": true, "Div": true, "Add": true, "Erf": true}

// geluChainGrad is x's gradient through the chain: with e = exp(−u²),
// dm/dx = h·A + h·x·(2k/√π)·e, the second term's constant folded into the
// exponent where it is positive: dx = g·(h·A + x·exp(ln(2hk/√π) − u²)).
// A scale h by a power of two goes on g instead, exactly, and the rest is
// the chain's with h = 1: so a chain whose ½ graph.SinkScales moved onto
// the next product's weight (whose g then comes scaled by ½ already) has
// the gradient of the chain as written, bit for bit.
func geluChainGrad(b *B, c geluChain, dy string) string {
	h := c.h
	if frac, _ := math.Frexp(math.Abs(h)); frac == 0.5 && h != 1 {
		dy, h = b.Mul(dy, b.ScalarLike(dy, h)), 1
	}
	w := b.Mul(c.u, c.u)
	coef := 2 * h * c.k / math.Sqrt(math.Pi)
	var t string
	if coef > 0 {
		t = b.Mul(c.x, b.Exp(b.Sub(b.ScalarLike(w, math.Log(coef)), w)))
	} else {
		t = b.Mul(b.Mul(c.x, b.Exp(b.Neg(w))), b.ScalarLike(w, coef))
	}
	ha := c.a
	if h != 1 {
		ha = b.Mul(c.a, b.ScalarLike(c.a, h))
	}
	return b.Mul(dy, b.Add(ha, t))
}

// scalarValue is the value of a one-element float constant v: an
// initializer, or a Cast of one (mixed precision's copy in the low type,
// whose rounded value it returns as the Cast would round it).
func scalarValue(g *graph.Graph, prod map[string]*graph.Node, v string) (float64, bool) {
	if p := prod[v]; p != nil && p.Op == "Cast" && p.Domain == "" {
		f, ok := scalarValue(g, prod, p.Inputs[0])
		if !ok {
			return 0, false
		}
		switch dtype.DType(p.Int("to", 0)) {
		case dtype.BFloat16, dtype.Float16, dtype.Float32:
			return roundTo(f, dtype.DType(p.Int("to", 0))), true
		}
		return 0, false
	}
	return g.ScalarConst(v)
}

// roundTo is f as a Cast to dt holds it.
func roundTo(f float64, dt dtype.DType) float64 {
	switch dt {
	case dtype.BFloat16:
		return float64(dtype.ToBFloat16(float32(f)).Float32())
	case dtype.Float16:
		return float64(dtype.ToFloat16(float32(f)).Float32())
	}
	return float64(float32(f))
}
