package memplan

import (
	"cmp"
	"math"
	"slices"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// CUDAMaxElements is the most elements a tensor may have for ONNX
// Runtime's CUDA kernels to take it: cuDNN's tensor descriptors (behind
// every reduction but Sum, Mean, SumSquare and LogSum, and behind
// convolutions and pooling) hold dimensions and strides as int, and
// refuse a tensor past 2^31 − 1 elements (CUDNN_STATUS_NOT_SUPPORTED); the
// provider's own kernels index with int too. The CPU's kernels take int64
// sizes.
const CUDAMaxElements = math.MaxInt32

// Large is a value of a graph with more elements than a limit.
type Large struct {
	Name string `json:"name"`
	// Node and Op are the node producing it; Op is "input" for a graph
	// input and "initializer" for a weight.
	Node     string  `json:"node,omitempty"`
	Op       string  `json:"op"`
	Shape    []int64 `json:"shape"`
	Elements int64   `json:"elements"`
}

// Oversize lists the values of g with more than limit elements, largest
// first, then in graph order. g's shapes must be concrete (Concrete). Shape
// inference leaves a zeros-like ConstantOfShape(Shape(x)) and the scatters
// into it unsized; they take x's shape and their data input's here. Other
// values whose shape is not known are left out.
func Oversize(g *graph.Graph, limit int64) []Large {
	var out []Large
	shapes := map[string][]int64{}
	shape := func(name string) []int64 {
		if s, ok := shapes[name]; ok {
			return s
		}
		info := g.Info(name)
		if !info.Known || slices.ContainsFunc(info.Shape, func(d int64) bool { return d < 0 }) {
			return nil
		}
		return info.Shape
	}
	producer := map[string]*graph.Node{}
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			producer[o] = n
		}
	}
	seen := map[string]bool{}
	add := func(name, node, op string) {
		if name == "" || seen[name] {
			return
		}
		seen[name] = true
		s := shape(name)
		if s == nil {
			return
		}
		shapes[name] = s
		if n := dtype.Numel(s); n > limit {
			out = append(out, Large{Name: name, Node: node, Op: op, Shape: slices.Clone(s), Elements: n})
		}
	}
	for _, in := range g.Inputs {
		add(in, "", "input")
	}
	for _, name := range g.InitOrder {
		add(name, "", "initializer")
	}
	for _, n := range g.Nodes {
		if len(n.Outputs) > 0 && shape(n.Outputs[0]) == nil {
			switch {
			case (n.Op == "ScatterElements" || n.Op == "ScatterND") && shape(n.Input(0)) != nil:
				shapes[n.Outputs[0]] = shape(n.Input(0))
			case n.Op == "ConstantOfShape":
				if p := producer[n.Input(0)]; p != nil && p.Op == "Shape" && len(p.Attrs) == 0 && shape(p.Input(0)) != nil {
					shapes[n.Outputs[0]] = shape(p.Input(0))
				}
			}
		}
		for _, o := range n.Outputs {
			add(o, n.Name, n.Op)
		}
	}
	slices.SortStableFunc(out, func(a, b Large) int { return cmp.Compare(b.Elements, a.Elements) })
	return out
}
