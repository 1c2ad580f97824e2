package autodiff

import (
	"slices"

	"github.com/ortrain/ortrain/training/graph"
)

// cheap are the ops whose result the backward pass recomputes rather than
// keeps from the forward pass: element-wise arithmetic, views and
// normalisations, a pass over memory each, against a Conv or MatMul they
// would sit beside. Random ops (Dropout) are never recomputed: a second
// draw would differ.
var cheap = map[string]bool{
	"Relu": true, "Sigmoid": true, "Tanh": true, "Exp": true, "Log": true, "Sqrt": true, "Neg": true, "Abs": true,
	"Reciprocal": true, "Erf": true, "Softplus": true, "Sin": true, "Cos": true, "Cast": true, "Clip": true,
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true, "Where": true, "Max": true, "Min": true,
	"Reshape": true, "Squeeze": true, "Unsqueeze": true, "Flatten": true, "Identity": true, "Transpose": true, "Expand": true,
	"InstanceNormalization": true, "LayerNormalization": true, "Softmax": true, graph.BatchNormTrainingOp: true,
}

// recomputeDepth bounds how many cheap ops deep one recomputation goes.
const recomputeDepth = 4

// RecomputeCheap lowers what the backward pass keeps from the forward pass.
// The first forward nodes of g are the forward pass, the rest its
// backward (as Gradients appends it). A forward value the backward reads
// is recomputed in the backward instead of kept when a few cheap ops
// (see cheap) make it from values kept anyway: graph inputs, constants and
// the other values the backward reads. SiLU's sigmoid is recomputed from
// its input, a normalisation's output from its input, GELU's
// intermediates from x; results are bit-identical, since the same kernels
// run on the same inputs. Values in keep (graph outputs, alive to the end
// anyway) are left alone. It returns the values no longer kept; the
// graph is sorted again.
func RecomputeCheap(g *graph.Graph, forward int, keep map[string]bool) ([]string, error) {
	prod := map[string]*graph.Node{}
	for _, n := range g.Nodes[:forward] {
		for _, o := range n.Outputs {
			if o != "" {
				prod[o] = n
			}
		}
	}
	// saved: forward values the backward reads, in forward order.
	isSaved := map[string]bool{}
	for _, n := range g.Nodes[forward:] {
		for _, in := range n.Inputs {
			if prod[in] != nil {
				isSaved[in] = true
			}
		}
	}
	var saved []string
	for _, n := range g.Nodes[:forward] {
		for _, o := range n.Outputs {
			if isSaved[o] {
				saved = append(saved, o)
			}
		}
	}
	dropped := map[string]bool{}
	// available reports whether v can be had in the backward: kept, or
	// recomputable within depth.
	var available, recomputable func(v string, depth int) bool
	available = func(v string, depth int) bool {
		p := prod[v]
		if v == "" || p == nil || p.Op == "Constant" {
			return true // a graph input or initializer, always there
		}
		if isSaved[v] && !dropped[v] {
			return true
		}
		return recomputable(v, depth)
	}
	recomputable = func(v string, depth int) bool {
		p := prod[v]
		if depth == 0 || p == nil || !cheap[p.Op] || len(p.Outputs) != 1 || p.Domain != "" && p.Op != graph.BatchNormTrainingOp {
			return false
		}
		for _, in := range p.Inputs {
			if !available(in, depth-1) {
				return false
			}
		}
		return true
	}
	for _, v := range saved {
		if !keep[v] && recomputable(v, recomputeDepth) {
			dropped[v] = true
		}
	}
	if len(dropped) == 0 {
		return nil, nil
	}
	// Emit the recomputations in forward order, each reading the others'
	// copies, and point the backward at them.
	need := map[string]bool{}
	var mark func(v string)
	mark = func(v string) {
		if need[v] {
			return
		}
		need[v] = true
		for _, in := range prod[v].Inputs {
			if prod[in] != nil && !(isSaved[in] && !dropped[in]) && prod[in].Op != "Constant" {
				mark(in)
			}
		}
	}
	for v := range dropped {
		mark(v)
	}
	var order []*graph.Node
	for _, n := range g.Nodes[:forward] {
		if len(n.Outputs) == 1 && need[n.Outputs[0]] {
			order = append(order, n)
		}
	}
	backward := slices.Clone(g.Nodes[forward:])
	clone := map[string]string{}
	for _, n := range order {
		c := n.Clone()
		c.Name = g.Fresh(n.Name + "/recompute")
		for i, in := range c.Inputs {
			if r, ok := clone[in]; ok {
				c.Inputs[i] = r
			}
		}
		c.Outputs[0] = g.Fresh(n.Outputs[0] + "/recompute")
		clone[n.Outputs[0]] = c.Outputs[0]
		g.AddNode(c)
	}
	for _, n := range backward {
		for i, in := range n.Inputs {
			if dropped[in] {
				n.Inputs[i] = clone[in]
			}
		}
	}
	var out []string
	for _, v := range saved {
		if dropped[v] {
			out = append(out, v)
		}
	}
	return out, g.Sort()
}
