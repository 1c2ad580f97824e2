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
	x, c, ok := g.powerScale(n)
	if !ok {
		return nil, 0, false
	}
	m := producers[x]
	if m == nil || m.Op != "MatMul" || m.Domain != "" || len(consumers[m.Outputs[0]]) != 1 || outputs[m.Outputs[0]] {
		return nil, 0, false
	}
	return m, c, true
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
	size := g.sizeParts
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

// SinkScales moves a scale by a power of two off a MatMul's operand onto
// its other operand where that one is smaller: the scale sits on the
// operand itself (Mul by 2^k, or Div) or one product deeper
// (Mul(Mul(x, 2^k), y) is Mul(Mul(x, y), 2^k)), each value on the way read
// by the next alone. The exact GELU as exporters write it,
// Mul(Mul(x, ½), A) or Mul(Mul(x, A), ½), feeds a transformer MLP's second
// product: MatMul(Mul(x, A), Mul(W, ½)) scales the weight [K, N] rather
// than the activation [B, L, K], one element-wise pass fewer over the
// MLP's widest activation in the forward, and one in the backward, where
// the chain's gradient has no scale left to apply. The values are the
// same bit for bit, as for HoistScales. It returns the number of scales
// moved.
func (g *Graph) SinkScales() int {
	producers, consumers := g.Producers(), g.Consumers()
	outputs := g.OutputSet()
	readBy := func(v string, n *Node) bool {
		return len(consumers[v]) == 1 && consumers[v][0] == n && !outputs[v]
	}
	drop := map[*Node]bool{}
	before := map[*Node][]*Node{}
	moved := 0
	for _, m := range g.Nodes {
		if m.Op != "MatMul" || m.Domain != "" || len(m.Inputs) != 2 || len(m.Outputs) != 1 {
			continue
		}
		for i := range 2 {
			v, other := m.Inputs[i], m.Inputs[1-i]
			n := producers[v]
			if n == nil || drop[n] || n.Domain != "" || !readBy(v, m) || !g.fewerElements(other, v) || g.Info(other).DType != g.Info(v).DType {
				continue
			}
			// The scale and where it goes from: m's operand itself, or
			// one of n's operands.
			scale, reader, at, x, factor := n, m, i, "", 0.0
			if y, f, ok := g.powerScale(n); ok {
				x, factor = y, f
			} else if n.Op == "Mul" && len(n.Inputs) == 2 {
				for j, in := range n.Inputs {
					p := producers[in]
					if p == nil || drop[p] || p.Domain != "" || !readBy(in, n) {
						continue
					}
					if y, f, ok := g.powerScale(p); ok {
						scale, reader, at, x, factor = p, n, j, y, f
						break
					}
				}
			}
			if factor == 0 {
				continue
			}
			t, err := Floats("", g.Info(other).DType, nil, []float64{factor})
			if err != nil {
				continue
			}
			reader.Inputs[at] = x
			drop[scale] = true
			b := NewBuilder(g, m.Name+"/")
			scaled := &Node{Op: "Mul", Name: g.Fresh(m.Name + "/sunk"), Inputs: []string{other, b.Const(t)},
				Outputs: []string{g.Fresh(other + "/scaled")}}
			g.AddNode(scaled)
			g.Nodes = g.Nodes[:len(g.Nodes)-1] // placed below, just before m
			m.Inputs[1-i] = scaled.Outputs[0]
			before[m] = append(before[m], scaled)
			moved++
			break
		}
	}
	if moved == 0 {
		return 0
	}
	var out []*Node
	for _, n := range g.Nodes {
		if drop[n] {
			continue
		}
		out = append(out, before[n]...)
		out = append(out, n)
	}
	g.Nodes = out
	return moved
}

// powerScale reports whether n scales a value by a power of two, as
// Mul(x, 2^k) (either order) or Div(x, 2^k), keeping its type and rank, and
// returns x and the factor.
func (g *Graph) powerScale(n *Node) (string, float64, bool) {
	if (n.Op != "Mul" && n.Op != "Div") || n.Domain != "" || len(n.Inputs) != 2 || len(n.Outputs) != 1 {
		return "", 0, false
	}
	for k, s := range n.Inputs {
		if n.Op == "Div" && k == 0 {
			continue
		}
		c, ok := g.ScalarConst(s)
		if !ok {
			continue
		}
		if n.Op == "Div" {
			c = 1 / c
		}
		if frac, _ := math.Frexp(math.Abs(c)); frac != 0.5 || math.Abs(c) < 0x1p-100 || math.Abs(c) > 0x1p100 {
			return "", 0, false
		}
		x := n.Inputs[1-k]
		if a, b := g.Info(n.Outputs[0]), g.Info(x); a.DType != b.DType || !a.Known || !b.Known || a.Rank() != b.Rank() {
			return "", 0, false
		}
		return x, c, true
	}
	return "", 0, false
}

// fewerElements reports whether a is known to hold fewer elements than b:
// by their known dimensions, where a has no unknown one or as many as b
// (a free batch in both).
func (g *Graph) fewerElements(a, b string) bool {
	ak, au, ok1 := g.sizeParts(a)
	bk, bu, ok2 := g.sizeParts(b)
	return ok1 && ok2 && (au == 0 || au == bu) && ak < bk
}

// sizeParts is v's element count over its known dimensions and the number
// of unknown ones; ok is false where nothing is known of v's shape.
func (g *Graph) sizeParts(v string) (known float64, unknown int, ok bool) {
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
