package precision

import (
	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// LowSoftmaxes gives the low type to the Softmax nodes that autocast left
// in float32 between Casts (Cast(s, float32) → Softmax → Cast(low) for the
// product after it, attention's P·V), where the device has such a kernel:
// ONNX Runtime's CUDA Softmax in bfloat16 and float16 keeps its maximum and
// sum in float32 and rounds only its output, the value the product read
// anyway. Over attention's [B, H, L, L] scores that is two of the three
// passes fewer, and the float32 probabilities are no longer what the step
// keeps for the backward: the low ones are, half the bytes, and the
// backward's float32 readers (the softmax gradient) read a float32 copy
// made just before the first of them. They see probabilities rounded to
// the low type, as the product does; PyTorch's memory-efficient attention
// recomputes them in float32 instead.
//
// It returns the number of nodes rewritten.
func LowSoftmaxes(g *graph.Graph, low dtype.DType, kernels Kernels) int {
	if kernels == nil || low == 0 {
		return 0
	}
	producers, consumers, outputs := g.Producers(), g.Consumers(), g.OutputSet()
	order := map[*graph.Node]int{}
	for i, n := range g.Nodes {
		order[n] = i
	}
	drop := map[*graph.Node]bool{}
	rename := map[string]string{}
	before := map[*graph.Node][]*graph.Node{} // a float32 reader → the Casts up to place before it
	rewritten := 0
	for _, n := range g.Nodes {
		lows, rest, ok := lowSoftmax(producers, consumers, outputs, n, low)
		if !ok || g.Info(producers[n.Input(0)].Input(0)).DType != low || !kernels(n, low) {
			continue
		}
		y32, yl := n.Outputs[0], lows[0].Outputs[0]
		for _, r := range lows {
			drop[r] = true
			rename[r.Outputs[0]] = yl
		}
		n.Inputs[0] = producers[n.Input(0)].Input(0)
		n.Outputs[0] = yl
		if len(rest) > 0 {
			first := rest[0]
			for _, r := range rest[1:] {
				if order[r] < order[first] {
					first = r
				}
			}
			// The float32 probabilities keep their name, now a copy of
			// the low ones.
			before[first] = append(before[first], &graph.Node{Op: "Cast", Name: g.Fresh("autocast/Cast"), Inputs: []string{yl}, Outputs: []string{y32},
				Attrs: []*graph.Attr{graph.AInt("to", int64(dtype.Float32))}})
		}
		rewritten++
	}
	if rewritten == 0 {
		return 0
	}
	g.Nodes = rewired(g.Nodes, drop, rename, before)
	return rewritten
}

// lowSoftmax reports whether n has LowSoftmaxes' pattern but for the type
// of the value cast: a Softmax whose input is a Cast to float32, whose
// output at least one Cast to low reads (lows) and no graph output is;
// rest are its other readers.
func lowSoftmax(producers map[string]*graph.Node, consumers map[string][]*graph.Node, outputs map[string]bool, n *graph.Node, low dtype.DType) (lows, rest []*graph.Node, ok bool) {
	if n.Op != "Softmax" || n.Domain != "" || len(n.Outputs) != 1 || outputs[n.Outputs[0]] {
		return nil, nil, false
	}
	p := producers[n.Input(0)]
	if p == nil || !IsCast(p, dtype.Float32) {
		return nil, nil, false
	}
	for _, r := range consumers[n.Outputs[0]] {
		if IsCast(r, low) && len(r.Outputs) == 1 {
			lows = append(lows, r)
		} else {
			rest = append(rest, r)
		}
	}
	return lows, rest, len(lows) > 0
}
