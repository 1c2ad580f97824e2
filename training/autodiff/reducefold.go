package autodiff

import (
	"slices"

	"github.com/ortrain/ortrain/training/graph"
)

// foldReduceSums merges the two ReduceSums graph.Builder.ReduceSumTo
// writes to bring a gradient to a per-channel parameter's [C, 1, ...]
// shape (the broadcast axes kept, then the leading ones dropped), when what
// follows is only Reshapes to constant shapes (a GroupNorm's weight and
// bias reshaped from [C]): one ReduceSum over all those axes feeds them
// instead, a launch and a pass over the partial sums fewer. Only the order
// of the additions changes. Nodes from index first on (the backward) are
// considered; the value names the caller keeps are left alone; new
// constants are named under prefix.
func foldReduceSums(g *graph.Graph, first int, outputs map[string]string, prefix string) {
	prod := g.Producers()
	readers := g.Consumers()
	kept := map[string]bool{}
	for _, v := range outputs {
		kept[v] = true
	}
	for _, o := range g.Outputs {
		kept[o] = true
	}
	drop := map[*graph.Node]bool{}
	for _, n := range g.Nodes[first:] {
		if n.Op != "ReduceSum" || n.Domain != "" || n.Int("keepdims", 1) != 0 || len(n.Inputs) != 2 || kept[n.Outputs[0]] {
			continue
		}
		a := prod[n.Inputs[0]]
		if a == nil || a.Op != "ReduceSum" || a.Domain != "" || a.Int("keepdims", 1) != 1 || len(a.Inputs) != 2 ||
			len(readers[a.Outputs[0]]) != 1 || kept[a.Outputs[0]] || drop[a] || slices.Index(g.Nodes, a) < first {
			continue
		}
		aAxes, ok1 := g.ReduceAxes(a)
		nAxes, ok2 := g.ReduceAxes(n)
		if !ok1 || !ok2 || len(aAxes) == 0 || len(nAxes) == 0 {
			continue
		}
		rs := readers[n.Outputs[0]]
		ok := len(rs) > 0
		for _, r := range rs {
			shape, isConst := g.ConstInts(r.Input(1))
			if r.Op != "Reshape" || r.Domain != "" || r.Inputs[0] != n.Outputs[0] || r.Input(1) == n.Outputs[0] || !isConst || slices.Contains(shape, 0) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		axes := slices.Sorted(slices.Values(append(slices.Clone(aAxes), nAxes...)))
		axes = slices.Compact(axes)
		b := graph.NewBuilder(g, prefix)
		a.Inputs[1] = b.Ints(axes...)
		info := g.Info(a.Outputs[0])
		if info.Known {
			shape := slices.Clone(info.Shape)
			for _, ax := range nAxes {
				shape[ax] = 1
			}
			info.Shape = shape
			g.Infos[a.Outputs[0]] = info
		}
		for _, r := range rs {
			r.Inputs[0] = a.Outputs[0]
		}
		drop[n] = true
	}
	if len(drop) > 0 {
		g.Nodes = slices.DeleteFunc(g.Nodes, func(n *graph.Node) bool { return drop[n] })
	}
}
