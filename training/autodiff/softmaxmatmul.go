package autodiff

import (
	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// softmaxProduct is a Softmax whose output P (over its last axis) only
// O = MatMul(P, V) reads, through the Casts of mixed precision's rounding
// to the product's type (casts, in order), with O's gradient do: the
// attention pattern, whose softmax gradient P ⊙ (dP - D) the product
// gives in fewer passes over the [B, H, L, L] scores (rowDots,
// shiftedGrad). The batch axes of P and V are the same, or V's broadcast
// over P's (not the other way).
type softmaxProduct struct {
	m     *graph.Node   // the MatMul
	casts []*graph.Node // P's Casts on the way to it
	o, do string
}

// softmaxIntoProduct reports whether n is such a Softmax and O has a
// gradient.
func softmaxIntoProduct(g *graph.Graph, n *graph.Node, consumers map[string][]*graph.Node, readers map[string]int, outputs map[string]bool, grad func(string) string) (softmaxProduct, bool) {
	var sp softmaxProduct
	p := n.Outputs[0]
	if n.Domain != "" {
		return sp, false
	}
	in := p // P, or its last Cast, as the MatMul reads it
	var m *graph.Node
	for {
		if readers[in] != 1 || outputs[in] || len(consumers[in]) != 1 {
			return sp, false
		}
		m = consumers[in][0]
		if m.Op != "Cast" || m.Domain != "" || !g.Info(m.Outputs[0]).Float() {
			break
		}
		sp.casts = append(sp.casts, m)
		in = m.Outputs[0]
	}
	if m.Op != "MatMul" || m.Domain != "" || m.Input(0) != in || m.Input(1) == in {
		return sp, false
	}
	pi, vi := g.Info(p), g.Info(m.Input(1))
	r := pi.Rank()
	if !pi.Known || !vi.Known || r < 2 || vi.Rank() != r {
		return sp, false
	}
	if a := n.Int("axis", -1); a != -1 && a != int64(r-1) {
		return sp, false
	}
	for i := range r - 2 {
		pd, vd := pi.Shape[i], vi.Shape[i]
		if !(vd == 1 && pd != 1 || pd >= 0 && vd == pd || g.SameDim(p, i, m.Input(1), i)) {
			return sp, false
		}
	}
	sp.m, sp.o = m, m.Outputs[0]
	if sp.do = grad(sp.o); sp.do == "" {
		return sp, false
	}
	return sp, true
}

// rowDots returns the row sums the softmax gradient needs, D_i =
// Σ_j dP_ij·P_ij, as Σ_k dO_ik·O_ik: with dP = dO·Vᵀ both are
// dO_i·Σ_j P_ij·V_j. P is [B, H, L, L] and O [B, H, L, d], so the
// product and sum run over d values a row instead of L (the
// FlashAttention backward's D), and dP is read once, not twice. Where P
// reaches the MatMul through Casts, the sums are those of the rounded P,
// which the product read, rather than of P, a difference of the
// rounding's order. They are formed in P's type (float32 under autocast,
// whose product writes O in the low type): they then match dP's type, and
// the products are not rounded to the low type before they are added.
func (sp softmaxProduct) rowDots(b *B, g *graph.Graph, p string) string {
	dt := g.Info(p).DType
	o, do := sp.o, sp.do
	if g.Info(o).DType != dt {
		o = b.Cast(o, dt)
	}
	if g.Info(do).DType != dt {
		do = b.Cast(do, dt)
	}
	return b.ReduceSum(b.Mul(do, o), true, -1)
}

// shiftedGrad returns dP - D, P's gradient dp less its row sums D, in P's
// type: the part of the softmax gradient P ⊙ (dP - D) over the scores.
// Where V's last size d is known it is one product, dP - D =
// [dO | D | 0] · [V | -1]ᵀ, with V widened to a multiple of 8 columns
// (the tensor cores' alignment; the extra ones are −1, and the extra ones
// of dO but D's are 0): the subtraction, a pass that read and wrote the
// [B, H, L, L] scores, becomes eight columns more of a product with d of
// them, and dP is never written (the product rule's is left unread). The
// product is taken in the type the MatMul read its operands in, and
// handed back through P's Casts as the MatMul's own gradient would be
// (the low type's rounding of a mixed-precision build, once, where dP
// and the difference were rounded each); D is rounded to that type too,
// as its column of the product. Otherwise, dp - D.
func (sp softmaxProduct) shiftedGrad(b *B, g *graph.Graph, p, dp string) string {
	d := sp.rowDots(b, g, p)
	v := sp.m.Input(1)
	vi, doi := g.Info(v), g.Info(sp.do)
	width := vi.Shape[vi.Rank()-1]
	dt := vi.DType
	if width <= 0 || doi.DType != dt || !vi.Float() {
		return b.Sub(dp, d)
	}
	wide := (width + 1 + 7) / 8 * 8
	extra := wide - width
	// V' = V·E + F: E copies V's columns into the first d of wide, F puts
	// −1 in the rest, each element exactly (one product of 1 by V's value
	// or of 0; no shape of V's needed, so nothing for the host).
	e := make([]float64, width*wide)
	for i := range width {
		e[i*wide+i] = 1
	}
	f := make([]float64, wide)
	for i := width; i < wide; i++ {
		f[i] = -1
	}
	first := make([]float64, extra)
	first[0] = 1
	et, err1 := graph.Floats("", dt, []int64{width, wide}, e)
	ft, err2 := graph.Floats("", dt, []int64{wide}, f)
	st, err3 := graph.Floats("", dt, []int64{extra}, first)
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			b.Fail("%v", err)
			return ""
		}
	}
	vw := b.Add(b.MatMul(v, b.Const(et)), b.Const(ft))
	// D in the product's type, rounded as the device's low type would
	// hold it where the product is emulated in float32 on rounded values.
	if low := sp.lowType(g); low != 0 && low != dt && g.Info(d).DType != low {
		d = b.Cast(d, low)
	}
	if g.Info(d).DType != dt {
		d = b.Cast(d, dt)
	}
	dow := b.Concat(-1, sp.do, b.Mul(d, b.Const(st)))
	s := b.ReduceSumTo(b.MatMul(dow, b.SwapLast(vw)), sp.m.Input(0))
	for i := len(sp.casts) - 1; i >= 0; i-- {
		if t := g.Info(sp.casts[i].Input(0)).DType; g.Info(s).DType != t {
			s = b.Cast(s, t)
		}
	}
	return s
}

// lowType is the float16 or bfloat16 type P is rounded to on its way to
// the product, 0 for none.
func (sp softmaxProduct) lowType(g *graph.Graph) dtype.DType {
	for _, c := range sp.casts {
		if t := g.Info(c.Outputs[0]).DType; t == dtype.Float16 || t == dtype.BFloat16 {
			return t
		}
	}
	return 0
}
