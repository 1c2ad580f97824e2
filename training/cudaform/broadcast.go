package cudaform

import (
	"slices"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// broadcastOps are the binary element-wise ops whose CUDA kernels choose
// their indexing as BinaryElementwiseBroadcastPrepareHelper does in ONNX
// Runtime's provider, true for those whose operands commute.
var broadcastOps = map[string]bool{
	"Add": true, "Mul": true, "Equal": true, "And": true, "Or": true, "Xor": true,
	"Sub": false, "Div": false, "Pow": false, "Greater": false, "Less": false,
	"GreaterOrEqual": false, "LessOrEqual": false,
}

// GeneralBroadcast reports whether the CUDA provider runs the binary
// element-wise node n with its general broadcast kernel, which finds each
// element's operand by a division per axis. Its fast kernels take operands
// of the same shape, a scalar, or a left operand shaped as the output with
// a right one that has a single axis longer than 1 (a bias per channel);
// any other broadcast goes to the general one. On an H200 that kernel
// added the diffusion LM's [1024, 1024] attention mask to its bfloat16
// [128, 12, 1024, 1024] scores at 1.3 TB/s (4.95 ms), where the per-channel
// kernel added a bias to [128, 1024, 3072] at 1.9. Operands whose shapes
// read the same count as the same (an unknown size, the batch, on both
// sides); any other unknown size as longer than 1.
func GeneralBroadcast(g *graph.Graph, n *graph.Node) bool {
	if _, ok := broadcastOps[n.Op]; !ok || n.Domain != "" || len(n.Inputs) != 2 || len(n.Outputs) != 1 {
		return false
	}
	l, r, o := g.Info(n.Input(0)), g.Info(n.Input(1)), g.Info(n.Outputs[0])
	switch {
	case !l.Known || !r.Known || !o.Known || slices.Equal(l.Shape, r.Shape):
		return false
	case l.Static() && dtype.Numel(l.Shape) <= 1, r.Static() && dtype.Numel(r.Shape) <= 1:
		return false
	}
	return !slices.Equal(l.Shape, o.Shape) || longAxes(r.Shape) != 1
}

// longAxes counts the sizes of s over 1, an unknown one among them.
func longAxes(s []int64) int {
	long := 0
	for _, d := range s {
		if d > 1 || d < 0 {
			long++
		}
	}
	return long
}

// FlattenBroadcasts rewrites the binary element-wise nodes the CUDA
// provider would run with its general broadcast kernel (GeneralBroadcast)
// so that it runs them with its per-channel one: where one operand has the
// output's shape and the other's sizes over 1 are one run of the output's
// axes, the first is viewed as [N, C, H] (the axes before the run, the
// run, the axes after; [N, C] where H is 1) and the second as [C, 1] (or
// [C]), and the result is viewed back. An attention mask [L, L] added to
// scores [B, heads, L, L] becomes [B·heads, L·L] plus [L·L]; a row
// statistic [B, heads, L, 1] taken from [B, heads, L, L] becomes
// [B·heads·L, L] less [B·heads·L, 1]. Where the full operand is on the
// right of an op whose operands commute, the two change places (which is
// all a bias on the left needs). Reshapes move nothing, and every element
// is computed from the same two values as before, bit for bit. An Add only
// a Softmax reads, in a type ONNX Runtime's BiasSoftmax takes, is left for
// its BiasSoftmaxFusion (LeftForBiasSoftmax), an Add a LayerNormalization
// reads for its layer-norm fusions. It returns the number of nodes
// rewritten; node order is kept.
func FlattenBroadcasts(g *graph.Graph) int {
	g.TraceDims()
	consumers, outputs := g.Consumers(), g.OutputSet()
	rewritten := 0
	nodes := slices.Clone(g.Nodes)
	out := make([]*graph.Node, 0, len(nodes))
	for _, n := range nodes {
		if !GeneralBroadcast(g, n) || LeftForBiasSoftmax(g, n, consumers, outputs) || addBeforeLayerNorm(n, consumers) {
			out = append(out, n)
			continue
		}
		swap, view, ok := flatView(g, n)
		if !ok {
			out = append(out, n)
			continue
		}
		rewritten++
		if swap {
			n.Inputs[0], n.Inputs[1] = n.Inputs[1], n.Inputs[0]
		}
		if view == nil {
			out = append(out, n)
			continue
		}
		partView := []int64{view[1], 1} // C is -1 where the run has the unknown size
		if len(view) == 2 {
			partView = partView[:1]
		}
		b := graph.NewBuilder(g, n.Name+"/")
		mark := len(g.Nodes)
		lhs := b.Reshape(n.Inputs[0], b.Ints(view...))
		rhs := b.Reshape(n.Inputs[1], b.Ints(partView...))
		out = append(out, g.Nodes[mark:]...)
		y := n.Outputs[0]
		n.Inputs, n.Outputs = []string{lhs, rhs}, []string{g.Fresh(y + "/flat")}
		g.InferNode(n)
		out = append(out, n)
		mark = len(g.Nodes)
		b.OpInto(y, "Reshape", []string{n.Outputs[0], b.Ints(g.Info(y).Shape...)})
		out = append(out, g.Nodes[mark:]...)
	}
	g.Nodes = out
	return rewritten
}

// LeftForBiasSoftmax reports whether n is an Add that ONNX Runtime's
// BiasSoftmaxFusion may fold into the Softmax that alone reads it, one
// BiasSoftmax kernel for both (a float32 or float16 attention's mask): its
// output read by that Softmax only, its type one BiasSoftmax has a kernel
// for (not bfloat16). Flattening would hide the pattern, so such an Add is
// left as it is (FusesIntoSoftmax says when the fusion happens).
func LeftForBiasSoftmax(g *graph.Graph, n *graph.Node, consumers map[string][]*graph.Node, outputs map[string]bool) bool {
	if n.Op != "Add" || n.Domain != "" || outputs[n.Outputs[0]] {
		return false
	}
	rs := consumers[n.Outputs[0]]
	return len(rs) == 1 && rs[0].Op == "Softmax" && rs[0].Domain == "" && biasSoftmaxTypes[g.Info(n.Outputs[0]).DType]
}

// addBeforeLayerNorm reports whether n is an Add a LayerNormalization
// reads, which ONNX Runtime's SkipLayerNormFusion and EmbedLayerNormFusion
// may fold into one kernel with it (an embedding plus positions, a
// residual sum): not worth hiding for the one node it would flatten.
func addBeforeLayerNorm(n *graph.Node, consumers map[string][]*graph.Node) bool {
	if n.Op != "Add" || n.Domain != "" {
		return false
	}
	return slices.ContainsFunc(consumers[n.Outputs[0]], func(r *graph.Node) bool { return r.Op == "LayerNormalization" })
}

// biasSoftmaxTypes are the types ONNX Runtime's BiasSoftmax kernel (and so
// its fusion) takes.
var biasSoftmaxTypes = map[dtype.DType]bool{dtype.Float32: true, dtype.Float16: true, dtype.Float64: true}

// FusesIntoSoftmax reports whether ONNX Runtime's BiasSoftmaxFusion folds the
// Add n, of device type dt, into softmax, the Softmax that alone reads its
// output: a type BiasSoftmax has a kernel for, and one operand (the bias)
// equal to the other from the softmax axis on and, before it, 1 wherever
// it broadcasts, on a leading run of the axes it has or a trailing one
// (BERT's mask [B, 1, 1, L] against scores [B, heads, L, L]; a mask
// [L, L]).
func FusesIntoSoftmax(g *graph.Graph, n, softmax *graph.Node, dt dtype.DType) bool {
	if n.Op != "Add" || n.Domain != "" || len(n.Inputs) != 2 || softmax.Op != "Softmax" || softmax.Domain != "" || !biasSoftmaxTypes[dt] {
		return false
	}
	a, b := g.Info(n.Input(0)).Shape, g.Info(n.Input(1)).Shape
	if !g.Info(n.Input(0)).Known || !g.Info(n.Input(1)).Known || len(a) == 0 || len(b) == 0 {
		return false
	}
	rank := max(len(a), len(b))
	k := int(softmax.Int("axis", -1))
	if k < 0 {
		k += rank
	}
	if k < 0 || k >= rank || rank-k > min(len(a), len(b)) {
		return false
	}
	if !slices.Equal(a[len(a)-(rank-k):], b[len(b)-(rank-k):]) || slices.Contains(a[len(a)-(rank-k):], -1) {
		return false
	}
	input, bias := a, b
	if len(b) > len(a) || len(a) == len(b) && dtype.Numel(a) < dtype.Numel(b) {
		input, bias = b, a
	}
	// The bias's axes before the softmax axis, aligned on the input's.
	lead := bias[:len(bias)-(rank-k)]
	in := input[len(input)-(rank-k)-len(lead) : len(input)-(rank-k)]
	same := func(i int) bool { return lead[i] == in[i] && lead[i] >= 0 }
	i := 0
	for i < len(lead) && same(i) {
		i++
	}
	for i < len(lead) && lead[i] == 1 {
		i++
	}
	inner := i == len(lead) // equal, then ones
	j := 0
	for j < len(lead) && lead[j] == 1 {
		j++
	}
	for j < len(lead) && same(j) {
		j++
	}
	return inner || j == len(lead) // or ones, then equal
}

// Flattenable reports whether FlattenBroadcasts could write n for the
// per-channel kernel, LeftForBiasSoftmax aside (a graph built emulated
// types a bfloat16 mask Add float32; the device's build flattens it).
// Sizes not known are matched as graph.TraceDims, run before, traced them.
func Flattenable(g *graph.Graph, n *graph.Node) bool {
	if !GeneralBroadcast(g, n) {
		return false
	}
	_, _, ok := flatView(g, n)
	return ok
}

// flatView plans n's rewrite: whether its operands change places, and the
// view of the operand with the output's shape (nil where changing places
// is enough). The other operand's sizes over 1 must be one run of the
// output's axes and the same as the output's there (an unknown size traced
// to the same dimension, see graph.SameDim); the output may have one
// unknown size, not after the run, which the view then takes as -1.
func flatView(g *graph.Graph, n *graph.Node) (swap bool, view []int64, ok bool) {
	y := n.Outputs[0]
	o := g.Info(y)
	full := slices.IndexFunc([]string{n.Input(0), n.Input(1)}, func(v string) bool { return slices.Equal(g.Info(v).Shape, o.Shape) })
	if full < 0 || full == 1 && !broadcastOps[n.Op] {
		return false, nil, false
	}
	part := n.Input(1 - full)
	ps := g.Info(part).Shape
	r, skip := len(o.Shape), len(o.Shape)-len(ps)
	if skip < 0 {
		return false, nil, false
	}
	long := func(i int) bool { return i >= skip && (ps[i-skip] > 1 || ps[i-skip] < 0) }
	lo, hi := -1, -1
	for i := range r {
		if long(i) {
			if lo < 0 {
				lo = i
			}
			hi = i
		}
	}
	if lo < 0 {
		return false, nil, false
	}
	for i := lo; i <= hi; i++ {
		if !g.SameDim(part, i-skip, n.Input(full), i) {
			return false, nil, false // a broadcast axis inside the run
		}
	}
	if longAxes(ps) == 1 {
		return full == 1, nil, true
	}
	if slices.Contains(o.Shape[hi+1:], -1) || unknowns(o.Shape) > 1 {
		return false, nil, false
	}
	view = []int64{dtype.Numel(o.Shape[:lo]), dtype.Numel(o.Shape[lo : hi+1])}
	for i := range view {
		if view[i] < 0 {
			view[i] = -1
		}
	}
	if h := dtype.Numel(o.Shape[hi+1:]); h > 1 {
		view = append(view, h)
	}
	return full == 1, view, true
}

// unknowns counts the sizes of s not known before the run.
func unknowns(s []int64) int {
	k := 0
	for _, d := range s {
		if d < 0 {
			k++
		}
	}
	return k
}
