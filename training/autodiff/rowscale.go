package autodiff

import (
	"fmt"
	"slices"

	"github.com/ortrain/ortrain/training/graph"
)

// rowScaleThroughGemm rewrites, in the backward nodes (from index first
// on), D = Softmax(X)·r — a softmax over the last axis of a matrix X,
// scaled per row by r (a language model's loss gradient: the tokens'
// weights) — whose readers are all Gemms taking D as their first operand:
// D·B becomes (S·B)·r and Dᵀ·B becomes Sᵀ·(r·B), scaling the Gemms'
// narrow operands and results instead of the vocabulary-wide D. The
// softmax S is then the only wide value, and ONNX Runtime writes it over
// X when X dies there: its input and output get a named row dimension
// (in g.Dims, written as value_info), which ONNX Runtime's inference
// would leave unknown and then not match.
func rowScaleThroughGemm(g *graph.Graph, first int) {
	readers := g.Consumers()
	outputs := g.OutputSet()
	prod := g.Producers()
	for _, m := range slices.Clone(g.Nodes[first:]) {
		if m.Op != "Mul" || m.Domain != "" || len(m.Inputs) != 2 || outputs[m.Outputs[0]] {
			continue
		}
		s, r := m.Inputs[0], m.Inputs[1]
		if p := prod[r]; p != nil && p.Op == "Softmax" {
			s, r = r, s
		}
		sm := prod[s]
		if sm == nil || sm.Op != "Softmax" || len(readers[s]) != 1 {
			continue
		}
		si, ri := g.Info(s), g.Info(r)
		if !si.Known || si.Rank() != 2 || !ri.Known || ri.Rank() != 2 || ri.Shape[1] != 1 {
			continue
		}
		if axis := sm.Int("axis", -1); axis != -1 && axis != 1 {
			continue
		}
		rs := readers[m.Outputs[0]]
		ok := len(rs) > 0
		for _, c := range rs {
			ok = ok && c.Op == "Gemm" && c.Domain == "" && len(c.Inputs) == 2 && c.Inputs[0] == m.Outputs[0] && c.Inputs[1] != m.Outputs[0] &&
				(c.Int("transA", 0) == 0 || c.Int("transB", 0) == 0)
		}
		if !ok {
			continue
		}
		for _, c := range rs {
			at := slices.Index(g.Nodes, c)
			if c.Int("transA", 0) == 0 {
				// (S·B)·r: the Gemm writes a fresh value the Mul scales
				// into the Gemm's old output.
				out := c.Outputs[0]
				tmp := g.Fresh(out + "_unscaled")
				c.Inputs[0], c.Outputs[0] = s, tmp
				g.Infos[tmp] = g.Infos[out]
				insertAfter(g, at, &graph.Node{Op: "Mul", Inputs: []string{tmp, r}, Outputs: []string{out}})
			} else {
				// Sᵀ·(r·B): B's rows are S's.
				scaled := g.Fresh(c.Inputs[1] + "_scaled")
				insertAt(g, at, &graph.Node{Op: "Mul", Inputs: []string{c.Inputs[1], r}, Outputs: []string{scaled}})
				c.Inputs[0], c.Inputs[1] = s, scaled
			}
		}
		g.Nodes = slices.DeleteFunc(g.Nodes, func(n *graph.Node) bool { return n == m })
		if len(g.Dims[s]) == 0 && si.Shape[0] < 0 {
			g.Dims[s] = []string{fmt.Sprintf("rows_%s", sm.Name), ""}
		}
	}
}

// NameSoftmaxInputs gives the input of each Softmax whose output has named
// dimensions (rowScaleThroughGemm) the same names, so that ONNX Runtime may
// write the softmax over it. It runs once the graph is final: a
// recomputation may have replaced the input since.
func NameSoftmaxInputs(g *graph.Graph) {
	inputs := map[string]bool{}
	for _, in := range g.Inputs {
		inputs[in] = true
	}
	for _, n := range g.Nodes {
		if n.Op != "Softmax" || len(g.Dims[n.Outputs[0]]) == 0 || inputs[n.Inputs[0]] {
			continue
		}
		if in := n.Inputs[0]; len(g.Dims[in]) == 0 && g.Info(in).Rank() == len(g.Dims[n.Outputs[0]]) {
			g.Dims[in] = slices.Clone(g.Dims[n.Outputs[0]])
		}
	}
}

// insertAt adds n to g before position i; insertAfter after it.
func insertAt(g *graph.Graph, i int, n *graph.Node) {
	g.AddNode(n)
	g.Nodes = slices.Insert(g.Nodes[:len(g.Nodes)-1], i, n)
}

func insertAfter(g *graph.Graph, i int, n *graph.Node) { insertAt(g, i+1, n) }
