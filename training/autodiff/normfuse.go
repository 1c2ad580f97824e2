package autodiff

import (
	"slices"

	"github.com/ortrain/ortrain/training/graph"
)

// A normalisation written as elementary ops, as recipes and exporters write
// GroupNorm (and custom LayerNorms) when their opset has no single op for
// it:
//
//	μ = ReduceMean(x, A)        d = x − μ
//	v = ReduceMean(d·d, A)      s = Sqrt(v + c)      y = d / s
//
// (keepdims on, c a constant). Differentiated op by op it costs about 20
// backward nodes: the Div, Sqrt, Add, both ReduceMeans (each a Shape, an
// Expand and a Div) and the Sub each emit their part, and d is kept for
// them. As a whole its gradient is the normalisations' one, with y = x̂:
//
//	dx = (dy − mean(dy) − y·mean(dy·y)) / s
//
// (the variance's dependence on μ vanishes as Σd = 0; c does not enter),
// 7 nodes, 2 reductions, reading only y, s and dy. normPattern finds the
// pattern at its Div; the chain's inner values then get no gradient and
// their nodes emit nothing.

// normChain is a matched pattern: its input x, and the values the fused
// rule reads (the Div's output y and s).
type normChain struct {
	x, s string
	axes []int64
}

// normPattern reports whether n is the Div that ends the pattern above,
// every inner value of which (μ, d, d·d, v, v + c, s) is read only inside
// it and is no graph output: another reader would want its own gradient.
func normPattern(g *graph.Graph, n *graph.Node, prod map[string]*graph.Node, readers map[string]int, outputs map[string]bool, active map[string]bool) (normChain, bool) {
	var none normChain
	if n.Op != "Div" || n.Domain != "" || len(n.Inputs) != 2 {
		return none, false
	}
	op := func(v, want string) *graph.Node {
		p := prod[v]
		if p == nil || p.Op != want || p.Domain != "" || outputs[v] {
			return nil
		}
		return p
	}
	d, s := n.Inputs[0], n.Inputs[1]
	sub, sqrt := op(d, "Sub"), op(s, "Sqrt")
	if sub == nil || sqrt == nil || len(sub.Inputs) != 2 {
		return none, false
	}
	x, mu := sub.Inputs[0], sub.Inputs[1]
	mean, add := op(mu, "ReduceMean"), op(sqrt.Inputs[0], "Add")
	if mean == nil || add == nil || mean.Inputs[0] != x || len(add.Inputs) != 2 {
		return none, false
	}
	v, c := add.Inputs[0], add.Inputs[1]
	if prod[v] == nil || prod[v].Op != "ReduceMean" {
		v, c = c, v
	}
	vmean := op(v, "ReduceMean")
	if vmean == nil || active[c] {
		return none, false
	}
	sq := op(vmean.Inputs[0], "Mul")
	if sq == nil || len(sq.Inputs) != 2 || sq.Inputs[0] != d || sq.Inputs[1] != d {
		return none, false
	}
	if mean.Int("keepdims", 1) != 1 || vmean.Int("keepdims", 1) != 1 {
		return none, false
	}
	axes, ok := g.ReduceAxes(mean)
	vaxes, vok := g.ReduceAxes(vmean)
	if !ok || !vok || !slices.Equal(axes, vaxes) {
		return none, false
	}
	// d has x's shape only if μ broadcasts into it, which keepdims makes so
	// when x's shape is known; y then has it too.
	xi, yi := g.Info(x), g.Info(n.Outputs[0])
	if !xi.Known || !yi.Known || !slices.Equal(xi.Shape, yi.Shape) || !xi.Float() || xi.DType != yi.DType {
		return none, false
	}
	// Who reads each inner value: μ the Sub, d the Mul (twice) and the
	// Div, d·d its ReduceMean, v the Add, v + c the Sqrt, s the Div.
	for v, want := range map[string]int{mu: 1, d: 3, sq.Outputs[0]: 1, v: 1, add.Outputs[0]: 1, s: 1} {
		if readers[v] != want {
			return none, false
		}
	}
	return normChain{x: x, s: s, axes: axes}, true
}

// normChainGrad is the pattern's gradient with respect to its input.
func normChainGrad(b *B, n *N, c normChain, dy string) string {
	yv := y(n)
	centred := b.Sub(dy, b.ReduceMean(dy, true, c.axes...))
	return b.Div(b.Sub(centred, b.Mul(yv, b.ReduceMean(b.Mul(dy, yv), true, c.axes...))), c.s)
}

// readerCounts counts, per value, the node inputs that read it (a node
// reading it twice counts twice), and names the graph outputs.
func readerCounts(g *graph.Graph) (map[string]int, map[string]bool) {
	r := map[string]int{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in != "" {
				r[in]++
			}
		}
	}
	outs := map[string]bool{}
	for _, o := range g.Outputs {
		outs[o] = true
	}
	return r, outs
}
