package precision

import (
	"slices"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// movesValues are the ops an exact-low operand may come through: their
// output holds only values of their input 0 (Pad also its constant, which
// must be exact too), the other inputs are indices, shapes or bounds. A
// subset of keepsValues: the ones that compute nothing, so that written
// again over the low value they need no low-precision kernel but a copy.
var movesValues = map[string]bool{
	"Identity": true, "Reshape": true, "Flatten": true, "Squeeze": true, "Unsqueeze": true, "Transpose": true,
	"Slice": true, "Gather": true, "GatherElements": true, "GatherND": true, "Expand": true, "Tile": true,
	"Pad": true, "DepthToSpace": true, "SpaceToDepth": true,
}

// ExactLowOrigin follows v back through ops that only move values
// (movesValues) to a Cast to float32 of a low-typed value: a float32 copy
// of a low value, which the low type holds exactly, and so every value on
// the way. It returns that low value and the nodes from it to v, the
// first nearest to it.
func ExactLowOrigin(g *graph.Graph, producers map[string]*graph.Node, v string, low dtype.DType) (string, []*graph.Node, bool) {
	var chain []*graph.Node
	for {
		q := producers[v]
		if q == nil || q.Domain != "" || len(q.Outputs) != 1 || q.Input(0) == "" {
			return "", nil, false
		}
		if IsCast(q, dtype.Float32) && g.Info(q.Input(0)).DType == low {
			slices.Reverse(chain)
			return q.Input(0), chain, true
		}
		if !movesValues[q.Op] {
			return "", nil, false
		}
		if q.Op == "Pad" && q.Input(2) != "" {
			c, ok := g.ScalarConst(q.Input(2))
			if !ok || !exactIn(float32(c), low) || float64(float32(c)) != c {
				return "", nil, false
			}
		}
		chain = append(chain, q)
		v = q.Input(0)
	}
}

// ExactLowProducts gives the low type to the matrix products autocast
// could not type: those autodiff wrote over float32 copies of low values,
// the weight gradients of convolutions the device runs in float32 on
// rounded values (ONNX Runtime's CUDA Conv has no bfloat16 kernel, so a
// bf16-mixed VQ-GAN's weight gradients were float32 GEMMs, 973 ms of its
// step on an H200 against 180 in 16-mixed). Each operand comes from such a
// copy through ops that only move values (Pad, Reshape, Transpose, Slice,
// Gather...), so the low type holds it exactly: those ops are written
// again over the low value (once, shared by the products that read them;
// from a Cast to low after the last of them the device has no low kernel
// for, where one has none), the product reads the low operands where the
// device has its low kernel, and a Cast hands its output back in float32.
// The product's output is rounded to the low type, as any low-precision
// product's is (a 16-mixed build's are): in a convolution's weight
// gradient written as several GEMMs summed (the CUDA forms of a volume's),
// each is rounded before the float32 sum. It returns the number of
// products given the low type.
func ExactLowProducts(g *graph.Graph, low dtype.DType, kernels Kernels) int {
	if kernels == nil || low == 0 {
		return 0
	}
	producers, outputs := g.Producers(), g.OutputSet()
	lowCopy := map[string]string{} // float32 value → its low clone
	before := map[*graph.Node][]*graph.Node{}
	after := map[*graph.Node][]*graph.Node{}
	add := func(n *graph.Node) *graph.Node {
		g.AddNode(n) // names it and infers its outputs
		g.Nodes = g.Nodes[:len(g.Nodes)-1]
		return n
	}
	lowConst := map[string]string{}
	rewritten := 0
	for _, p := range slices.Clone(g.Nodes) {
		if p.Domain != "" || (p.Op != "MatMul" && p.Op != "Gemm") || len(p.Outputs) != 1 || outputs[p.Outputs[0]] ||
			p.Op == "Gemm" && p.Input(2) != "" || len(p.Inputs) < 2 || g.Info(p.Outputs[0]).DType != dtype.Float32 {
			continue
		}
		type operand struct {
			origin string
			chain  []*graph.Node
		}
		var ops [2]operand
		ok := true
		for k := range 2 {
			if g.Info(p.Inputs[k]).DType != dtype.Float32 {
				ok = false
				break
			}
			o, chain, found := ExactLowOrigin(g, producers, p.Inputs[k], low)
			ok = ok && found
			ops[k] = operand{o, chain}
		}
		if !ok || !kernels(p, low) {
			continue
		}
		for k, op := range ops {
			v, chain := op.origin, op.chain
			// An op the device has no low kernel for (ONNX Runtime's CUDA
			// Pad may lack bfloat16) stays float32: the chain goes low
			// after the last such one, by a Cast of its output (exact, as
			// every value on the chain is).
			for j := len(chain) - 1; j >= 0; j-- {
				if kernels(chain[j], low) {
					continue
				}
				last := chain[j].Outputs[0]
				c, done := lowCopy[last]
				if !done {
					cast := add(&graph.Node{Op: "Cast", Name: g.Fresh("autocast/Cast"), Inputs: []string{last},
						Outputs: []string{g.Fresh(last + "/" + low.String())}, Attrs: []*graph.Attr{graph.AInt("to", int64(low))}})
					before[p] = append(before[p], cast)
					c = cast.Outputs[0]
					lowCopy[last] = c
				}
				v, chain = c, chain[j+1:]
				break
			}
			for _, q := range chain {
				if c, done := lowCopy[q.Outputs[0]]; done {
					v = c
					continue
				}
				in := slices.Clone(q.Inputs)
				in[0] = v
				if q.Op == "Pad" && q.Input(2) != "" {
					c, done := lowConst[q.Input(2)]
					if !done {
						cast := add(&graph.Node{Op: "Cast", Name: g.Fresh("autocast/Cast"), Inputs: []string{q.Input(2)},
							Outputs: []string{g.Fresh(q.Input(2) + "/" + low.String())}, Attrs: []*graph.Attr{graph.AInt("to", int64(low))}})
						before[p] = append(before[p], cast)
						c = cast.Outputs[0]
						lowConst[q.Input(2)] = c
					}
					in[2] = c
				}
				clone := add(&graph.Node{Op: q.Op, Name: g.Fresh(q.Name + "/" + low.String()), Inputs: in,
					Outputs: []string{g.Fresh(q.Outputs[0] + "/" + low.String())}, Attrs: slices.Clone(q.Attrs)})
				producers[clone.Outputs[0]] = clone
				before[p] = append(before[p], clone)
				lowCopy[q.Outputs[0]] = clone.Outputs[0]
				v = clone.Outputs[0]
			}
			p.Inputs[k] = v
		}
		y := p.Outputs[0]
		p.Outputs[0] = g.Fresh(y + "/" + low.String())
		g.InferNode(p)
		producers[p.Outputs[0]] = p
		up := add(&graph.Node{Op: "Cast", Name: g.Fresh("autocast/Cast"), Inputs: []string{p.Outputs[0]},
			Outputs: []string{y}, Attrs: []*graph.Attr{graph.AInt("to", int64(dtype.Float32))}})
		producers[y] = up
		after[p] = append(after[p], up)
		rewritten++
	}
	if rewritten == 0 {
		return 0
	}
	out := make([]*graph.Node, 0, len(g.Nodes)+2*rewritten)
	for _, n := range g.Nodes {
		out = append(out, before[n]...)
		out = append(out, n)
		out = append(out, after[n]...)
	}
	g.Nodes = out
	return rewritten
}

// exactIn reports whether the low type holds f exactly.
func exactIn(f float32, low dtype.DType) bool {
	switch low {
	case dtype.BFloat16:
		return sameBits(dtype.ToBFloat16(f).Float32(), f)
	case dtype.Float16:
		return sameBits(dtype.ToFloat16(f).Float32(), f)
	}
	return false
}
