package autodiff

import "github.com/ortrain/ortrain/training/graph"

// softmaxRowDots returns, for a Softmax whose output P (over its last
// axis) is read only by O = MatMul(P, V), the row sums its gradient
// needs, Σ_j dP_ij·P_ij, as Σ_k dO_ik·O_ik: with dP = dO·Vᵀ both are
// dO_i·Σ_j P_ij·V_j. Attention's P is [B, H, L, L] and O [B, H, L, d],
// so the product and sum run over d values a row instead of L (the
// FlashAttention backward's D), and dP is read once, not twice. The
// batch axes of P and V must be the same (no broadcast of P over V's).
// P may reach the MatMul through Casts (mixed precision's rounding to
// the product's type): the sums are then those of the rounded P, which
// the product read, rather than of P, a difference of the rounding's
// order; they are formed in P's type. "" where the pattern does not hold or O has no gradient.
func softmaxRowDots(b *B, g *graph.Graph, n *graph.Node, consumers map[string][]*graph.Node, readers map[string]int, outputs map[string]bool, grad func(string) string) string {
	p := n.Outputs[0]
	if n.Domain != "" {
		return ""
	}
	in := p // P, or its last Cast, as the MatMul reads it
	var m *graph.Node
	for {
		if readers[in] != 1 || outputs[in] || len(consumers[in]) != 1 {
			return ""
		}
		m = consumers[in][0]
		if m.Op != "Cast" || m.Domain != "" || !g.Info(m.Outputs[0]).Float() {
			break
		}
		in = m.Outputs[0]
	}
	if m.Op != "MatMul" || m.Domain != "" || m.Input(0) != in || m.Input(1) == in {
		return ""
	}
	pi, vi := g.Info(p), g.Info(m.Input(1))
	r := pi.Rank()
	if !pi.Known || !vi.Known || r < 2 || vi.Rank() != r {
		return ""
	}
	if a := n.Int("axis", -1); a != -1 && a != int64(r-1) {
		return ""
	}
	for i := range r - 2 {
		pd, vd := pi.Shape[i], vi.Shape[i]
		if !(vd == 1 && pd != 1 || pd >= 0 && vd == pd || g.SameDim(p, i, m.Input(1), i)) {
			return ""
		}
	}
	o := m.Outputs[0]
	do := grad(o)
	if do == "" {
		return ""
	}
	// In P's type (float32 under autocast, whose product writes O in the
	// low type): the sums then match dP's type, and the products are not
	// rounded to the low type before they are added.
	dt := g.Info(p).DType
	if g.Info(o).DType != dt {
		o = b.Cast(o, dt)
	}
	if g.Info(do).DType != dt {
		do = b.Cast(do, dt)
	}
	return b.ReduceSum(b.Mul(do, o), true, -1)
}
