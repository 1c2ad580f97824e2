package autodiff

import "github.com/ortrain/ortrain/training/graph"

// logSoftmaxGatherGrad returns, for n = GatherElements(Y, idx, axis a)
// where Y = LogSoftmax(X, a) is read by n alone (a language model's
// log-likelihood of its targets), X's gradient written at once:
//
//	dX = scatter_add(-softmax(X)·s, idx, g),  s = Σ_a g (kept as an axis),
//
// g being n's output gradient. The rules one by one scatter g onto zeros
// (Y's gradient), sum it back over a, and subtract softmax(X) times that:
// over a language model's [B, L, V] logits, three more passes over the
// vocabulary-wide tensor and a zeros tensor to fill. Where the indices
// have one entry along a, s is g itself. logSoftmax is the LogSoftmax
// node; "" where the pattern does not hold.
func logSoftmaxGatherGrad(b *B, g *graph.Graph, n *graph.Node, prod map[string]*graph.Node, readers map[string]int, outputs map[string]bool, dy string) (logSoftmax *graph.Node, dx string) {
	if n.Op != "GatherElements" || n.Domain != "" || dy == "" {
		return nil, ""
	}
	ys := n.Input(0)
	ls := prod[ys]
	if ls == nil || ls.Op != "LogSoftmax" || ls.Domain != "" || readers[ys] != 1 || outputs[ys] {
		return nil, ""
	}
	yi, ii := g.Info(ys), g.Info(n.Input(1))
	r := yi.Rank()
	if !yi.Known || !ii.Known || ii.Rank() != r || r == 0 {
		return nil, ""
	}
	axis := func(a int64) int64 {
		if a < 0 {
			a += int64(r)
		}
		return a
	}
	a := axis(n.Int("axis", 0))
	if axis(ls.Int("axis", -1)) != a {
		return nil, ""
	}
	s := dy
	if ii.Shape[a] != 1 {
		s = b.ReduceSum(dy, true, a)
	}
	// s, shaped as the indices with a kept, must broadcast over Y: the
	// other axes the same. Where that is not certain before the run (a
	// model's logits and targets each flattened to rows), s is reshaped to
	// Y's shape with a kept, which fails at run time unless the sizes
	// agree (GatherElements takes no index axis longer than its input's).
	for i := range r {
		if int64(i) == a || ii.Shape[i] >= 0 && ii.Shape[i] == yi.Shape[i] || g.SameDim(ys, i, n.Input(1), i) {
			continue
		}
		if ii.Shape[i] >= 0 && yi.Shape[i] >= 0 {
			return nil, "" // certainly different: the rules one by one
		}
		shape := b.Shape(ys)
		var parts []string
		if a > 0 {
			parts = append(parts, b.Slice(shape, []int64{0}, []int64{a}, []int64{0}, nil))
		}
		parts = append(parts, b.Ints(1))
		if a < int64(r-1) {
			parts = append(parts, b.Slice(shape, []int64{a + 1}, []int64{int64(r)}, []int64{0}, nil))
		}
		s = b.Reshape(s, b.Concat(0, parts...))
		break
	}
	return ls, b.Op("ScatterElements", []string{b.Mul(b.Exp(ys), b.Neg(s)), n.Input(1), dy},
		graph.AInt("axis", a), graph.AString("reduction", "add"))
}
