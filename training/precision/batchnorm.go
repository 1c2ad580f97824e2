package precision

import (
	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// LowBatchNorms gives the low type to the BatchNormalization nodes that
// autocast left in float32 between Casts (Cast(h, float32) → BN → Cast(low),
// outputsInputType): each reads h itself, with its scale, bias, mean and
// variance cast to the low type, and writes its output in it, where the
// device has such a kernel (ONNX Runtime's CUDA provider has it in float16:
// cuDNN normalises in float32 inside and rounds the output, as PyTorch's
// autocast does for a float16 BatchNorm). That is two passes over the
// activation fewer per layer, and the float32 output never exists: in
// ResNet-50's step, forward and recomputed, the largest traffic after the
// statistics. The batch statistics themselves are still computed in
// float32 from the float32 copy, and the backward reads them so.
//
// The per-channel inputs rounded to the low type change the output by
// about one rounding of it. Each per-channel value is cast once for every
// layer that reads it (a layer and its recomputation share the copy). It
// returns the number of nodes rewritten; the float32 copies nothing reads
// any more are left to Prune. An error leaves g half rewritten.
func LowBatchNorms(g *graph.Graph, low dtype.DType, kernels Kernels) (int, error) {
	if kernels == nil || low == 0 {
		return 0, nil
	}
	producers, consumers, outputs := g.Producers(), g.Consumers(), g.OutputSet()
	type match struct{ readers []*graph.Node }
	found := map[*graph.Node]match{}
	var first *graph.Node
	// The per-channel vectors that are graph inputs (a layer's scale and
	// bias, the running statistics an eval graph reads) are cast together,
	// one Concat, Cast and Split for all layers, before the first.
	var whole []string
	seen := map[string]bool{}
	for _, n := range g.Nodes {
		x32, readers, ok := LowBatchNorm(g, producers, consumers, outputs, n)
		if !ok || g.Info(producers[x32].Input(0)).DType != low || dtype.DType(readers[0].Int("to", 0)) != low || !kernels(n, low) {
			continue
		}
		found[n] = match{readers}
		if first == nil {
			first = n
		}
		for _, v := range n.Inputs[1:5] {
			if i := g.Info(v); producers[v] == nil && i.DType != low && i.Static() && i.Rank() == 1 && !seen[v] {
				seen[v] = true
				whole = append(whole, v)
			}
		}
	}
	if len(found) == 0 {
		return 0, nil
	}
	b := graph.NewBuilder(g, "autocast/")
	lowCopy := map[string]string{}
	old := g.Nodes
	nodes := make([]*graph.Node, 0, len(old)+len(whole)+2)
	emit := func(mk func()) {
		at := len(g.Nodes)
		mk()
		nodes = append(nodes, g.Nodes[at:]...)
	}
	drop := map[*graph.Node]bool{}
	rename := map[string]string{}
	for _, n := range old {
		m, ok := found[n]
		if !ok {
			nodes = append(nodes, n)
			continue
		}
		if n == first && len(whole) > 0 {
			emit(func() { castTogether(b, whole, low, lowCopy) })
		}
		inputs := []string{producers[n.Input(0)].Input(0)}
		for _, v := range n.Inputs[1:5] {
			c, done := lowCopy[v]
			if !done && g.Info(v).DType == low {
				c, done = v, true
			}
			if !done {
				emit(func() { c = b.Cast(v, low) })
				lowCopy[v] = c
			}
			inputs = append(inputs, c)
		}
		// The node writes the first low copy's value; the other copies'
		// readers read it too.
		out := m.readers[0].Outputs[0]
		for _, r := range m.readers {
			drop[r] = true
			rename[r.Outputs[0]] = out
		}
		n.Inputs = inputs
		n.Outputs = []string{out}
		nodes = append(nodes, n)
	}
	if b.Err != nil {
		return 0, b.Err
	}
	g.Nodes = rewired(nodes, drop, rename, nil)
	return len(found), nil
}

// rewired returns nodes without those in drop, every input renamed as
// rename says, and the nodes before[n] placed just before n.
func rewired(nodes []*graph.Node, drop map[*graph.Node]bool, rename map[string]string, before map[*graph.Node][]*graph.Node) []*graph.Node {
	out := make([]*graph.Node, 0, len(nodes)+len(before))
	for _, n := range nodes {
		if drop[n] {
			continue
		}
		for i, in := range n.Inputs {
			if r, ok := rename[in]; ok {
				n.Inputs[i] = r
			}
		}
		out = append(out, before[n]...)
		out = append(out, n)
	}
	return out
}

// castTogether casts the rank-1 values vs to low as one Concat, Cast and
// Split, recording each low copy in copies.
func castTogether(b *graph.Builder, vs []string, low dtype.DType, copies map[string]string) {
	if len(vs) == 1 {
		copies[vs[0]] = b.Cast(vs[0], low)
		return
	}
	lengths := make([]int64, len(vs))
	for i, v := range vs {
		lengths[i] = b.Info(v).Shape[0]
	}
	parts := b.OpN("Split", []string{b.Cast(b.Concat(0, vs...), low), b.Ints(lengths...)}, len(vs), graph.AInt("axis", 0))
	for i, v := range vs {
		copies[v] = parts[i]
	}
}

// LowBatchNorm reports whether n has LowBatchNorms' pattern but for the
// types: an inference-mode BatchNormalization with one output, whose input
// is a Cast to float32 and whose output only Casts read (to one type, not
// float32) and no graph output is. x32 is the Cast's output, readers the
// Casts. Step-time plans price graphs built for a CPU as a GPU would run
// them, and so ask the same question of a graph whose types are not the
// device's.
func LowBatchNorm(g *graph.Graph, producers map[string]*graph.Node, consumers map[string][]*graph.Node, outputs map[string]bool, n *graph.Node) (x32 string, readers []*graph.Node, ok bool) {
	if n.Op != "BatchNormalization" || n.Domain != "" || n.Int("training_mode", 0) != 0 || len(n.Inputs) != 5 {
		return "", nil, false
	}
	for _, o := range n.Outputs[1:] {
		if o != "" {
			return "", nil, false
		}
	}
	y := n.Outputs[0]
	p := producers[n.Input(0)]
	if p == nil || !IsCast(p, dtype.Float32) || outputs[y] {
		return "", nil, false
	}
	readers = consumers[y]
	if len(readers) == 0 {
		return "", nil, false
	}
	to := dtype.DType(readers[0].Int("to", 0))
	for _, r := range readers {
		if !IsCast(r, to) || to == dtype.Float32 || len(r.Outputs) != 1 || r.Input(0) != y {
			return "", nil, false
		}
	}
	return n.Input(0), readers, true
}

// IsCast reports whether n is a Cast to dt.
func IsCast(n *graph.Node, dt dtype.DType) bool {
	return n.Op == "Cast" && n.Domain == "" && dtype.DType(n.Int("to", 0)) == dt
}
