package graph

import (
	"fmt"
	"slices"
)

// The stop-gradient marker: an Identity in the forward pass across which
// autodiff sends no gradient. PyTorch's .detach() leaves no trace in an
// ONNX export, which breaks the straight-through estimator and the
// codebook/commitment losses of vector quantisation; models mark those
// edges with this op instead (models/pytorch/ortrain_export.py exports
// stop_gradient(x) as it). ONNX Runtime does not know the domain, so every
// graph handed to it has the markers stripped first.
const (
	StopGradientOp     = "StopGradient"
	StopGradientDomain = "ortrain"
)

// BatchNormTrainingOp, in the ortrain domain, is a BatchNormalization
// whose mean and variance inputs are the batch statistics of its own
// input X: training-mode normalisation in a form ONNX Runtime runs with
// one kernel. Its gradient rule differentiates through the statistics, so
// the backward pass keeps only X (as PyTorch does), not the centred and
// normalised copies an elementary expansion would hold.
// StripStopGradients lowers it to BatchNormalization.
const BatchNormTrainingOp = "BatchNormTraining"

// UpdateBufferOp, in the ortrain domain, gives a buffer (model state that
// is not trained by gradients, like BatchNorm's running statistics) its
// value for the next training step: UpdateBuffer(buffer, value) outputs
// buffer+".out". Training graphs lower it to an Identity of value and
// return the output; eval graphs and exports drop it (DropBufferUpdates).
const UpdateBufferOp = "UpdateBuffer"

// IsUpdateBuffer reports whether n is a buffer update.
func IsUpdateBuffer(n *Node) bool {
	return n.Op == UpdateBufferOp && n.Domain == StopGradientDomain
}

// UpdateBuffer records value as buffer's next value, returning the update's
// output (buffer+".out"), which the model must list among its outputs.
func (b *Builder) UpdateBuffer(buffer, value string) string {
	if b.Err != nil {
		return ""
	}
	b.G.Domains[StopGradientDomain] = 1
	out := buffer + ".out"
	b.G.Reserve(out)
	b.G.AddNode(&Node{Op: UpdateBufferOp, Domain: StopGradientDomain, Name: b.G.Fresh(b.Prefix + UpdateBufferOp), Inputs: []string{buffer, value}, Outputs: []string{out}})
	return out
}

// DropBufferUpdates removes the buffer updates and their outputs: a graph
// that only evaluates leaves its buffers as they are.
func (g *Graph) DropBufferUpdates() {
	drop := map[string]bool{}
	g.Nodes = slices.DeleteFunc(g.Nodes, func(n *Node) bool {
		if IsUpdateBuffer(n) {
			drop[n.Outputs[0]] = true
			return true
		}
		return false
	})
	g.Outputs = slices.DeleteFunc(g.Outputs, func(o string) bool { return drop[o] })
}

// IsStopGradient reports whether n is the stop-gradient marker.
func IsStopGradient(n *Node) bool {
	return n.Op == StopGradientOp && n.Domain == StopGradientDomain
}

// StopGradient passes x through unchanged while cutting its gradient.
func (b *Builder) StopGradient(x string) string {
	if b.Err != nil {
		return ""
	}
	b.G.Domains[StopGradientDomain] = 1
	out := b.G.Fresh(b.Prefix + StopGradientOp + "_out")
	b.G.AddNode(&Node{Op: StopGradientOp, Domain: StopGradientDomain, Name: b.G.Fresh(b.Prefix + StopGradientOp), Inputs: []string{x}, Outputs: []string{out}})
	return out
}

// StripStopGradients turns every stop-gradient marker into an Identity
// (which ONNX Runtime folds away), every BatchNormTraining into the
// BatchNormalization it computes, every buffer update into an Identity of
// the new value, every training-only marker into an Identity (as training
// computes it; eval graphs zero them first, ZeroTrainingOnly), and drops the ortrain domain import, so
// that the graph runs on stock ONNX Runtime. Call it after autodiff.
func (g *Graph) StripStopGradients() {
	for _, n := range g.Nodes {
		switch {
		case IsStopGradient(n):
			n.Op, n.Domain = "Identity", ""
		case n.Op == BatchNormTrainingOp && n.Domain == StopGradientDomain:
			n.Op, n.Domain = "BatchNormalization", ""
		case IsUpdateBuffer(n):
			n.Op, n.Domain, n.Inputs = "Identity", "", n.Inputs[1:]
		}
	}
	g.LowerTrainingOnly()
	delete(g.Domains, StopGradientDomain)
}

// UnknownValueError is a value name asked for that the graph does not have.
type UnknownValueError struct{ Name, Why string }

func (e *UnknownValueError) Error() string {
	return fmt.Sprintf("graph: no value named %q in the model (%s); `ortrain artifacts inspect` lists the names", e.Name, e.Why)
}

// BadInput marks the error as the user's to fix (exit code 2).
func (e *UnknownValueError) BadInput() bool { return true }

// StopGradientAt inserts a stop-gradient marker after each named value and
// makes every node reading it read the marker's output instead; graph
// outputs keep the original value. It is how a user cuts gradients by
// tensor name (--stop-gradient NAME) in a model exported without markers.
func (g *Graph) StopGradientAt(names []string) error {
	cons := g.Consumers()
	for _, name := range names {
		if _, ok := g.Infos[name]; !ok && !slices.Contains(g.Inputs, name) {
			return &UnknownValueError{name, "asked to stop gradients at it"}
		}
		b := NewBuilder(g, name+"/")
		s := b.StopGradient(name)
		g.Infos[s] = g.Infos[name]
		for _, n := range cons[name] {
			for i, in := range n.Inputs {
				if in == name {
					n.Inputs[i] = s
				}
			}
		}
	}
	return g.Sort()
}
