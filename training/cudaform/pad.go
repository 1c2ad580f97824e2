package cudaform

import (
	"slices"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// SplitPads rewrites each constant Pad the CUDA provider would run with
// its general kernel as Pads it runs with its fast one, over reshaped
// views. The fast kernel takes a rank ≤ 3 tensor padded on its last two
// axes only ([C, H, W], as NCHW's H and W); the general one wrote about
// 10¹⁰ elements a second on an H200 (0.74 s of the 3-D VQ-GAN's step went
// to padding its volumes). A volume [N, C, D, H, W] padded on D, H and W
// becomes a Pad of [N·C·D, H, W] on H and W, then of [N·C, D, H'·W'] on D:
// two passes at the fast kernel's speed. It returns the number of Pads
// rewritten; node order is kept.
func SplitPads(g *graph.Graph) int {
	rewritten := 0
	nodes := slices.Clone(g.Nodes)
	out := make([]*graph.Node, 0, len(nodes))
	for _, n := range nodes {
		steps, ok := padSteps(g, n)
		if !ok {
			out = append(out, n)
			continue
		}
		mark := len(g.Nodes)
		b := graph.NewBuilder(g, n.Name+"/")
		shape := slices.Clone(g.Info(n.Input(0)).Shape)
		v := n.Input(0)
		for _, s := range steps {
			// The view [everything before, axis, everything after]; the
			// last axis alone is [everything before, 1, it].
			view := []int64{-1, shape[s.axis], dtype.Numel(shape[s.axis+1:])}
			pads := []int64{0, s.before, 0, 0, s.after, 0}
			switch {
			case s.two:
				view[2] = shape[s.axis+1]
				pads[2], pads[5] = s.before2, s.after2
			case s.axis == len(shape)-1:
				view = []int64{-1, 1, shape[s.axis]}
				pads = []int64{0, 0, s.before, 0, 0, s.after}
			}
			v = b.Reshape(v, b.Ints(view...))
			in := []string{v, b.Ints(pads...)}
			if n.Input(2) != "" {
				in = append(in, n.Input(2))
			}
			v = b.Op("Pad", in)
			shape[s.axis] += s.before + s.after
			if s.two {
				shape[s.axis+1] += s.before2 + s.after2
			}
		}
		final := shape // at most one dimension not fixed, before the padded ones
		b.OpInto(n.Outputs[0], "Reshape", []string{v, b.Ints(final...)})
		if b.Err != nil {
			g.Nodes = g.Nodes[:mark]
			out = append(out, n)
			continue
		}
		out = append(out, g.Nodes[mark:]...)
		rewritten++
	}
	g.Nodes = out
	return rewritten
}

// padStep is one fast Pad, on axis (and axis+1 when two).
type padStep struct {
	axis            int
	two             bool
	before, after   int64
	before2, after2 int64 // axis+1's, when two
}

// padSteps plans n's rewrite: the fast Pads, the last axes first. Only
// constant Pads with constant, non-negative pads whose input has a known
// shape, fixed from the first padded axis on and with at most one size
// not fixed, that the fast kernel would not take as they are.
func padSteps(g *graph.Graph, n *graph.Node) ([]padStep, bool) {
	if n.Op != "Pad" || n.Domain != "" || len(n.Outputs) != 1 || n.Input(3) != "" {
		return nil, false
	}
	if a := n.Attr("mode"); a != nil && string(a.GetS()) != "constant" {
		return nil, false
	}
	x := g.Info(n.Input(0))
	pads, ok := g.ConstInts(n.Input(1))
	r := len(x.Shape)
	if !x.Known || !ok || len(pads) != 2*r || r < 2 || slices.ContainsFunc(pads, func(p int64) bool { return p < 0 }) {
		return nil, false
	}
	var padded []int
	for a := range r {
		if pads[a] != 0 || pads[r+a] != 0 {
			padded = append(padded, a)
		}
	}
	unknown := 0
	for _, d := range x.Shape {
		if d < 0 {
			unknown++
		}
	}
	if len(padded) == 0 || fastPad(r, padded) || unknown > 1 || slices.Contains(x.Shape[padded[0]:], -1) {
		return nil, false
	}
	var steps []padStep
	for i := len(padded) - 1; i >= 0; i-- {
		a := padded[i]
		if a == r-1 && i > 0 && padded[i-1] == r-2 {
			steps = append(steps, padStep{axis: r - 2, two: true, before: pads[r-2], after: pads[2*r-2], before2: pads[r-1], after2: pads[2*r-1]})
			i--
			continue
		}
		steps = append(steps, padStep{axis: a, before: pads[a], after: pads[r+a]})
	}
	return steps, true
}

// fastPad reports whether the CUDA provider's fast Pad kernel takes a
// rank-r tensor padded on these axes: rank 2; rank 3 or 4 padded on its
// last two axes only.
func fastPad(r int, padded []int) bool {
	return r == 2 || (r == 3 || r == 4) && padded[0] >= r-2
}
