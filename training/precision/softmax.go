package precision

import (
	"slices"

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

// softmaxGrad is a softmax's gradient as autodiff writes it, Mul =
// P ⊙ Sub, Sub = dP - r, with P the softmax's probabilities (its output or
// a float32 copy of it), dP the gradient reaching them and r their rows'
// Σ P·dP; or, where autodiff formed dP - r in the product that gives dP
// (attention's, softmaxmatmul.go), P ⊙ DP with DP a float32 Cast of that
// product and no Sub. Readers are the Casts to one type other than
// float32 that alone read the product.
type softmaxGrad struct {
	Sub          *graph.Node // nil where DP is dP - r already
	P, DP        string      // Mul's and Sub's operands; or Mul's
	Readers      []*graph.Node
	probsOnRight bool // Mul(dP - r, P) rather than Mul(P, dP - r)
}

// lowSoftmaxGrad reports whether m is the product of a softmaxGrad: the
// pattern but for the types.
func lowSoftmaxGrad(producers map[string]*graph.Node, consumers map[string][]*graph.Node, outputs map[string]bool, m *graph.Node) (softmaxGrad, bool) {
	return softmaxGradOf(producers, consumers, outputs, m, false)
}

// softmaxGradOf is lowSoftmaxGrad, and with flat also takes dP - r read
// through a Reshape that only m reads (the Sub then is the flat one).
func softmaxGradOf(producers map[string]*graph.Node, consumers map[string][]*graph.Node, outputs map[string]bool, m *graph.Node, flat bool) (softmaxGrad, bool) {
	var d softmaxGrad
	if m.Op != "Mul" || m.Domain != "" || len(m.Inputs) != 2 {
		return d, false
	}
	probs := func(v string) bool {
		p := producers[v]
		if p != nil && IsCast(p, dtype.Float32) {
			p = producers[p.Input(0)]
		}
		return p != nil && p.Op == "Softmax" && p.Domain == ""
	}
	found := false
	for i := range 2 {
		if !probs(m.Input(i)) {
			continue
		}
		s := producers[m.Input(1-i)]
		if s != nil && IsCast(s, dtype.Float32) && !outputs[s.Outputs[0]] && len(consumers[s.Outputs[0]]) == 1 {
			d, found = softmaxGrad{P: m.Input(i), DP: m.Input(1 - i), probsOnRight: i == 1}, true
			continue
		}
		if flat && s != nil && s.Op == "Reshape" && !outputs[s.Outputs[0]] && len(consumers[s.Outputs[0]]) == 1 {
			s = producers[s.Input(0)]
		}
		if s == nil || s.Op != "Sub" || s.Domain != "" || outputs[s.Outputs[0]] || len(consumers[s.Outputs[0]]) != 1 {
			continue
		}
		d, found = softmaxGrad{Sub: s, P: m.Input(i), DP: s.Input(0), probsOnRight: i == 1}, true
	}
	if !found {
		return d, false
	}
	readers, ok := lowReaders(consumers, outputs, m.Outputs[0])
	d.Readers = readers
	return d, ok
}

// SoftmaxGradTo reports whether m is the product of a softmax's
// gradient that LowSoftmaxGrads runs in low where P and dP are low on
// the device (the pattern, its product cast to low): step-time plans ask
// it of graphs built for a CPU, where that P is a float32 value, and
// which CUDA builds finish with cudaform's rewrites, so dP - r may reach
// the product through a Reshape of a flattened Sub (FlattenBroadcasts).
func SoftmaxGradTo(producers map[string]*graph.Node, consumers map[string][]*graph.Node, outputs map[string]bool, m *graph.Node, low dtype.DType) bool {
	d, ok := softmaxGradOf(producers, consumers, outputs, m, true)
	if ok && d.Sub == nil {
		// dP - r from the product, which such a graph rounds to low.
		r := producers[producers[d.DP].Input(0)]
		ok = r != nil && IsCast(r, low)
	}
	return ok && dtype.DType(d.Readers[0].Int("to", 0)) == low
}

// LowSoftmaxGrads gives the low type to softmax gradients whose P and dP
// are float32 copies of low values and whose product goes on in the low
// type (attention's, which the next product reads), where the device has
// the kernels: dP - r and P ⊙ (dP - r) read and write the low type, r
// cast to it, in place of float32 copies of P and dP (attention's
// [B, H, L, L] in the diffusion LM: 38 bytes an element, with the Casts,
// become 10). Each op rounds its output where the float32 chain rounded
// once at the end; dP and P are already rounded to the low type, and a
// NumPy simulation of both chains in bfloat16 over softmax rows of 256 and
// 512 gave relative L2 errors 1.2–1.6 times the float32 chain's
// (3.3·10⁻³ against 2.9·10⁻³ at unit scores and gradients). Where the
// product gave dP - r (autodiff's attention form) only P ⊙ (dP - r) is
// left, which in the low type rounds once what the float32 product of
// the same two low values rounded once: exactly the same. It returns
// the number rewritten; the float32 values nothing reads any more are
// left to Prune.
func LowSoftmaxGrads(g *graph.Graph, low dtype.DType, kernels Kernels) int {
	if kernels == nil || low == 0 {
		return 0
	}
	producers, consumers, outputs := g.Producers(), g.Consumers(), g.OutputSet()
	b := graph.NewBuilder(g, "autocast/")
	drop := map[*graph.Node]bool{}
	rename := map[string]string{}
	before := map[*graph.Node][]*graph.Node{}
	rewritten := 0
	for _, m := range slices.Clone(g.Nodes) {
		d, ok := lowSoftmaxGrad(producers, consumers, outputs, m)
		if !ok || dtype.DType(d.Readers[0].Int("to", 0)) != low || !kernels(m, low) || d.Sub != nil && !kernels(d.Sub, low) {
			continue
		}
		p, dp := lowSource(g, producers, d.P, low), lowSource(g, producers, d.DP, low)
		if p == "" || dp == "" {
			continue
		}
		out := d.Readers[0].Outputs[0]
		for _, r := range d.Readers {
			drop[r] = true
			rename[r.Outputs[0]] = out
		}
		at := len(g.Nodes)
		s := dp // dP - r already, from the product
		if d.Sub != nil {
			r := d.Sub.Input(1)
			if g.Info(r).DType != low {
				r = b.Cast(r, low)
			}
			s = b.Sub(dp, r)
		}
		in := []string{p, s}
		if d.probsOnRight {
			in = []string{s, p}
		}
		b.OpInto(out, "Mul", in)
		// Placed before the float32 product, which nothing reads now and
		// Prune removes.
		before[m] = append(before[m], g.Nodes[at:]...)
		g.Nodes = g.Nodes[:at]
		rewritten++
	}
	if b.Err != nil || rewritten == 0 {
		return 0
	}
	g.Nodes = rewired(g.Nodes, drop, rename, before)
	return rewritten
}
