package graph

import (
	"math"
)

// HoistScales moves a scale by a power of two from a MatMul's product to
// its smaller operand: attention's Mul(MatMul(q, kᵀ), 1/8) (or Div by 8)
// becomes MatMul(Mul(q, 1/8), kᵀ), one pass over q [B, H, L, 64] instead
// of over the scores [B, H, L, L], and the backward's scale moves with it.
// Scaling by a power of two is exact in every float format (short of
// underflow into subnormals), each product and partial sum scaling with
// it, so the values are the same, bit for bit, in float32 and in a low
// precision alike. Other scales stay: moved, they would round
// differently. It returns the number of scales moved.
func (g *Graph) HoistScales() int {
	producers, consumers := g.Producers(), g.Consumers()
	outputs := g.OutputSet()
	moved := 0
	var out []*Node
	for _, n := range g.Nodes {
		m, factor, ok := g.scaledProduct(n, producers, consumers, outputs)
		if !ok {
			out = append(out, n)
			continue
		}
		i := g.smallerOperand(m)
		if i < 0 {
			out = append(out, n)
			continue
		}
		b := NewBuilder(g, n.Name+"/")
		t, err := Floats("", g.Info(m.Inputs[i]).DType, nil, []float64{factor})
		if err != nil {
			out = append(out, n)
			continue
		}
		scaled := &Node{Op: "Mul", Name: g.Fresh(n.Name + "/hoisted"), Inputs: []string{m.Inputs[i], b.Const(t)},
			Outputs: []string{g.Fresh(m.Inputs[i] + "/scaled")}}
		g.AddNode(scaled)
		m.Inputs[i] = scaled.Outputs[0]
		// The product takes the scale's output name; the scale goes.
		old := m.Outputs[0]
		m.Outputs[0] = n.Outputs[0]
		delete(g.Infos, old)
		delete(g.Dims, old)
		// m is earlier in out than n: the hoisted Mul goes just before it.
		for k := len(out) - 1; k >= 0; k-- {
			if out[k] == m {
				out = append(out[:k], append([]*Node{scaled}, out[k:]...)...)
				break
			}
		}
		moved++
	}
	g.Nodes = out
	return moved
}

// scaledProduct reports whether n scales a MatMul's product, read by n
// alone, by a power of two (Mul by 2^k, or Div by 2^k), and returns the
// MatMul and the factor.
func (g *Graph) scaledProduct(n *Node, producers map[string]*Node, consumers map[string][]*Node, outputs map[string]bool) (*Node, float64, bool) {
	if (n.Op != "Mul" && n.Op != "Div") || n.Domain != "" || len(n.Inputs) != 2 || len(n.Outputs) != 1 {
		return nil, 0, false
	}
	for k, v := range n.Inputs {
		if n.Op == "Div" && k == 0 {
			continue
		}
		c, ok := g.ScalarConst(v)
		if !ok {
			continue
		}
		m := producers[n.Inputs[1-k]]
		if m == nil || m.Op != "MatMul" || m.Domain != "" || len(consumers[m.Outputs[0]]) != 1 || outputs[m.Outputs[0]] {
			return nil, 0, false
		}
		if n.Op == "Div" {
			c = 1 / c
		}
		if frac, _ := math.Frexp(math.Abs(c)); frac != 0.5 || math.Abs(c) < 0x1p-100 || math.Abs(c) > 0x1p100 {
			return nil, 0, false
		}
		// The scale neither changes the type nor broadcasts to more axes.
		if a, b := g.Info(n.Outputs[0]), g.Info(m.Outputs[0]); a.DType != b.DType || !a.Known || !b.Known || a.Rank() != b.Rank() {
			return nil, 0, false
		}
		return m, c, true
	}
	return nil, 0, false
}

// ScalarConst returns the value of a one-element float initializer.
func (g *Graph) ScalarConst(v string) (float64, bool) {
	t := g.Initializers[v]
	if t == nil || Numel(t) != 1 || !g.Info(v).Float() {
		return 0, false
	}
	f, err := FloatData(t)
	if err != nil || len(f) != 1 {
		return 0, false
	}
	return f[0], true
}

// smallerOperand is the index of m's operand with fewer elements than its
// product (the first of two equal ones), -1 where neither is known to
// be: sizes compare where the operands and the product have the same
// unknown dimensions (a free batch), by their known ones.
func (g *Graph) smallerOperand(m *Node) int {
	size := func(v string) (known float64, unknown int, ok bool) {
		info := g.Info(v)
		if !info.Known {
			return 0, 0, false
		}
		known = 1
		for _, d := range info.Shape {
			if d < 0 {
				unknown++
			} else {
				known *= float64(d)
			}
		}
		return known, unknown, true
	}
	p, pu, ok := size(m.Outputs[0])
	if !ok {
		return -1
	}
	best, bestSize := -1, p
	for i, in := range m.Inputs {
		s, u, ok := size(in)
		if ok && u == pu && s < bestSize {
			best, bestSize = i, s
		}
	}
	return best
}
