// Package cudaform rewrites ortrain's graphs so that ONNX Runtime's CUDA
// provider runs them with its fast kernels, where an equivalent form of the
// same computation has one. The rewrites keep the values (up to the order
// of floating-point additions) and run on any provider; the CPU's graphs
// are left as they are.
package cudaform

import (
	"slices"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort/onnxpb"
	"github.com/ortrain/ortrain/training/graph"
)

// Rewrite applies every rewrite of the package to g.
func Rewrite(g *graph.Graph) {
	FuseSquares(g)
	SplitReductions(g)
	SplitPads(g)
	FlattenBroadcasts(g)
}

// FastReduce reports whether ONNX Runtime's CUDA provider runs a
// ReduceSum/Mean/SumSquare/LogSum with its own kernel: the reduced axes
// one contiguous run touching the first or the last axis (or all axes),
// once the axes of size 1 are set aside, as the provider does first (a
// row statistic [N, C, 1, 1] summed over {0, 2, 3} is [N, C] over {0}).
// Any other reduction goes to cuDNN, which reduced NCHW's per-channel
// {0, 2, 3} at 0.2 TB/s on an H200 (3.75 ms for 822 MB).
func FastReduce(g *graph.Graph, n *graph.Node) bool {
	axes, ok := g.ReduceAxes(n)
	shape := g.Info(n.Input(0)).Shape
	if !ok || len(axes) == 0 || len(shape) == 0 {
		return ok
	}
	// Renumber the axes over the sizes other than 1.
	var kept []int64
	rank := int64(0)
	for i, d := range shape {
		if d == 1 {
			continue
		}
		if slices.Contains(axes, int64(i)) {
			kept = append(kept, rank)
		}
		rank++
	}
	if len(kept) == 0 {
		return true
	}
	return len(contiguousRuns(kept)) == 1 && (kept[0] == 0 || kept[len(kept)-1] == rank-1)
}

// secondStage is the op that finishes a split reduction over the first
// stage's partial results.
var secondStage = map[string]string{"ReduceSum": "ReduceSum", "ReduceMean": "ReduceMean", "ReduceSumSquare": "ReduceSum"}

// SplitReductions rewrites each reduction over a leading run of axes and a
// trailing one (NCHW's per-channel {0, 2, 3}: BatchNorm's statistics and
// the gradients of per-channel parameters) as two reductions the CUDA
// provider runs with its own kernel: the trailing run first, then the
// leading run over the partial results. A mean of equal-sized means is the
// mean, so only the order of additions changes. Reductions of float16 and
// bfloat16 values are left whole: the partial results would be rounded to
// the low type. It returns the number of reductions split; node order is
// kept, each first stage just before its second.
func SplitReductions(g *graph.Graph) int {
	split := 0
	nodes := slices.Clone(g.Nodes)
	out := make([]*graph.Node, 0, len(nodes))
	for _, n := range nodes {
		lead, trail, ok := splittable(g, n)
		if !ok {
			out = append(out, n)
			continue
		}
		b := graph.NewBuilder(g, n.Name+"/")
		first := &graph.Node{Op: n.Op, Name: g.Fresh(n.Name + "/trailing"), Inputs: []string{n.Inputs[0]},
			Outputs: []string{g.Fresh(n.Outputs[0] + "/partial")}, Attrs: slices.Clone(n.Attrs)}
		setAxes(b, first, trail)
		g.AddNode(first)
		// Removing trailing axes leaves the leading ones' numbers as
		// they were, kept or not.
		n.Op = secondStage[n.Op]
		n.Inputs = []string{first.Outputs[0]}
		setAxes(b, n, lead)
		out = append(out, first, n)
		split++
	}
	g.Nodes = out
	return split
}

// setAxes gives n its axes as an input (ReduceSum from opset 13, every
// reduction from 18) or as an attribute, replacing any it had.
func setAxes(b *graph.Builder, n *graph.Node, axes []int64) {
	n.Attrs = slices.DeleteFunc(n.Attrs, func(a *onnxpb.AttributeProto) bool { return a.GetName() == "axes" })
	n.Inputs = n.Inputs[:1]
	if n.Op == "ReduceSum" || b.G.Opset >= 18 {
		n.Inputs = append(n.Inputs, b.Ints(axes...))
		return
	}
	n.Attrs = append(n.Attrs, graph.AInts("axes", axes))
}

// splittable says whether n is a reduction SplitReductions rewrites, and
// its leading and trailing runs of axes.
func splittable(g *graph.Graph, n *graph.Node) (lead, trail []int64, ok bool) {
	if _, known := secondStage[n.Op]; !known || n.Domain != "" || len(n.Outputs) != 1 {
		return nil, nil, false
	}
	x := g.Info(n.Input(0))
	// Sizes are not asked for: the batch is seldom fixed, and a split
	// costs one launch (microseconds) where cuDNN's pass over an
	// activation costs milliseconds.
	if !x.Known || (x.DType != dtype.Float32 && x.DType != dtype.Float64) {
		return nil, nil, false
	}
	axes, known := g.ReduceAxes(n)
	if !known || len(axes) == 0 || FastReduce(g, n) {
		return nil, nil, false
	}
	runs := contiguousRuns(axes)
	if len(runs) != 2 || runs[0][0] != 0 || runs[1][len(runs[1])-1] != int64(len(x.Shape)-1) {
		return nil, nil, false
	}
	return runs[0], runs[1], true
}

// contiguousRuns splits sorted axes into runs of consecutive numbers.
func contiguousRuns(axes []int64) [][]int64 {
	var runs [][]int64
	start := 0
	for i := 1; i <= len(axes); i++ {
		if i == len(axes) || axes[i] != axes[i-1]+1 {
			runs = append(runs, axes[start:i])
			start = i
		}
	}
	return runs
}
