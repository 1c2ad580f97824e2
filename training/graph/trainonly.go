package graph

import (
	"slices"

	"github.com/ortrain/ortrain/dtype"
)

// TrainingOnlyOp, in the ortrain domain, marks a scalar that exists only
// while training: an adversarial loss term, or a discriminator's logits
// logged beside it. Training graphs lower it to an Identity
// (LowerTrainingOnly); eval graphs replace it by a constant zero
// (ZeroTrainingOnly), so that whatever only it reads — a discriminator,
// the global step — drops out of them, and validation reports the model's
// own losses.
const TrainingOnlyOp = "TrainingOnly"

// GlobalStepInput is the graph input, a float32 scalar, through which a
// model reads the number of optimizer steps taken before the current one
// (Lightning's global_step): the trainer feeds it to training graphs that
// declare it, so that a loss term can start at a given step.
const GlobalStepInput = "ortrain.global_step"

// IsTrainingOnly reports whether n is the training-only marker.
func IsTrainingOnly(n *Node) bool {
	return n.Op == TrainingOnlyOp && n.Domain == StopGradientDomain
}

// TrainingOnly marks x, a floating scalar, as a training-only value and
// returns the marked value.
func (b *Builder) TrainingOnly(x string) string {
	if b.Err != nil {
		return ""
	}
	if info := b.Info(x); !info.Known || len(info.Shape) != 0 || !info.Float() {
		return b.Fail("graph: TrainingOnly(%s): %v is not a floating scalar", x, info)
	}
	b.G.Domains[StopGradientDomain] = 1
	out := b.G.Fresh(b.Prefix + TrainingOnlyOp + "_out")
	b.G.AddNode(&Node{Op: TrainingOnlyOp, Domain: StopGradientDomain, Name: b.G.Fresh(b.Prefix + TrainingOnlyOp), Inputs: []string{x}, Outputs: []string{out}})
	return out
}

// LowerTrainingOnly turns every training-only marker into an Identity, as
// a training graph computes it.
func (g *Graph) LowerTrainingOnly() {
	for _, n := range g.Nodes {
		if IsTrainingOnly(n) {
			n.Op, n.Domain = "Identity", ""
		}
	}
}

// ZeroTrainingOnly turns every training-only marker into a constant zero
// of its type; Prune then drops what only the markers read.
func (g *Graph) ZeroTrainingOnly() {
	for _, n := range g.Nodes {
		if !IsTrainingOnly(n) {
			continue
		}
		dt := g.Info(n.Input(0)).DType
		t, err := Floats("", dt, nil, []float64{0})
		if err != nil { // TrainingOnly admits floating scalars only
			t, dt = Float32s("", nil, []float32{0}), dtype.Float32
		}
		n.Op, n.Domain, n.Inputs = "Constant", "", nil
		n.Attrs = []*Attr{ATensor("value", t)}
		g.Infos[n.Outputs[0]] = Info{DType: dt, Known: true, Shape: []int64{}}
	}
}

// DropUnreadInputs removes the named graph inputs that no node reads and
// no output is: what a pruned graph no longer needs fed.
func (g *Graph) DropUnreadInputs(names ...string) {
	read := map[string]bool{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			read[in] = true
		}
	}
	for _, o := range g.Outputs {
		read[o] = true
	}
	g.Inputs = slices.DeleteFunc(g.Inputs, func(in string) bool { return slices.Contains(names, in) && !read[in] })
}
