package autodiff

import (
	"slices"
	"strings"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// batchScaledGradients writes the gradients that are a vector of static
// length times a scalar (a BatchNorm's dγ and dβ: its per-channel means
// times the elements per channel, batchNormTrainingGrad) as one product
// over their concatenation, split into the gradients: ResNet-50's 106 in
// a handful of nodes where each was a Mul, on a GPU a launch. Each
// element's product is the same. Only a gradient that nothing else in
// the graph reads is taken, so the Split, last in the graph, comes after
// every vector it concatenates and before nothing that needs it.
func batchScaledGradients(g *graph.Graph, first int, out map[string]string) error {
	readers := map[string]int{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			readers[in]++
		}
	}
	outputs := g.OutputSet()
	prod := map[string]*graph.Node{}
	for _, n := range g.Nodes[first:] {
		for _, o := range n.Outputs {
			prod[o] = n
		}
	}
	type scaled struct {
		mul  *graph.Node
		vec  string
		part factorPart
	}
	groups := map[dtype.DType][]scaled{}
	var types []dtype.DType
	params := make([]string, 0, len(out))
	for w := range out {
		params = append(params, w)
	}
	slices.Sort(params)
	for _, w := range params {
		d := out[w]
		p := prod[d]
		if p == nil || p.Op != "Mul" || p.Domain != "" || len(p.Inputs) != 2 || len(p.Outputs) != 1 || readers[d] > 0 || outputs[d] {
			continue
		}
		di := g.Info(d)
		if !di.Known || !di.Static() || di.Rank() != 1 {
			continue
		}
		for k, vec := range p.Inputs {
			s := p.Inputs[1-k]
			vi, si := g.Info(vec), g.Info(s)
			if !vi.Known || !vi.Static() || !slices.Equal(vi.Shape, di.Shape) || vi.DType != di.DType ||
				!si.Known || !si.Static() || si.Rank() > 1 || numel(si.Shape) != 1 || si.DType != di.DType {
				continue
			}
			part := factorPart{n: di.Shape[0], v: s}
			if t := g.Initializers[s]; t != nil {
				vals, err := graph.FloatData(t)
				if err != nil {
					continue
				}
				part = factorPart{n: di.Shape[0], c: vals[0]}
			}
			if groups[di.DType] == nil {
				types = append(types, di.DType)
			}
			groups[di.DType] = append(groups[di.DType], scaled{mul: p, vec: vec, part: part})
			break
		}
	}
	b := graph.NewBuilder(g, sharedPrefix+"grads/")
	drop := map[*graph.Node]bool{}
	for _, dt := range types {
		group := groups[dt]
		if len(group) < 2 {
			continue
		}
		// Constant factors first, then each run-time value's together.
		slices.SortStableFunc(group, func(a, c scaled) int { return strings.Compare(a.part.v, c.part.v) })
		var vecs, outs []string
		var lengths []int64
		parts := make([]factorPart, len(group))
		for i, s := range group {
			vecs, outs = append(vecs, s.vec), append(outs, s.mul.Outputs[0])
			lengths = append(lengths, s.part.n)
			parts[i] = s.part
			drop[s.mul] = true
		}
		all := b.Mul(b.Concat(0, vecs...), factorVector(b, dt, parts))
		g.AddNode(&graph.Node{Op: "Split", Name: g.Fresh(sharedPrefix + "grads/Split"),
			Inputs: []string{all, b.Ints(lengths...)}, Outputs: outs, Attrs: []*graph.Attr{graph.AInt("axis", 0)}})
	}
	g.Nodes = slices.DeleteFunc(g.Nodes, func(n *graph.Node) bool { return drop[n] })
	return b.Err
}

// factorPart is n elements that take one factor: the number c, or the
// scalar value v where it is computed at run time.
type factorPart struct {
	n int64
	c float64
	v string
}

// factorVector is the factors of parts in their order, typed dt: each run
// of constant parts one constant, each run of parts with the same value
// one Expand of it; callers put the parts of a value together.
func factorVector(b *graph.Builder, dt dtype.DType, parts []factorPart) string {
	var factors []string
	var consts []float64
	flush := func() {
		if len(consts) == 0 {
			return
		}
		t, err := graph.Floats("", dt, []int64{int64(len(consts))}, consts)
		if err != nil {
			b.Fail("%v", err)
			return
		}
		factors, consts = append(factors, b.Const(t)), nil
	}
	for i := 0; i < len(parts); {
		p := parts[i]
		if p.v == "" {
			for range p.n {
				consts = append(consts, p.c)
			}
			i++
			continue
		}
		flush()
		run, j := int64(0), i
		for ; j < len(parts) && parts[j].v == p.v; j++ {
			run += parts[j].n
		}
		factors = append(factors, b.Op("Expand", []string{p.v, b.Ints(run)}))
		i = j
	}
	flush()
	if len(factors) == 1 {
		return factors[0]
	}
	return b.Concat(0, factors...)
}
