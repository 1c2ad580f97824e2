// Package loss appends a training loss to a model graph that was exported
// without one: MSE, L1, cross-entropy over class indices with label
// smoothing, BCE with logits, or a scalar output of the model itself.
// Losses are built from ordinary ops so that autodiff differentiates them
// with the same rules as the model.
package loss

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// The loss kinds.
const (
	MSE           = "mse"
	L1            = "l1"
	CrossEntropy  = "cross_entropy"
	BCEWithLogits = "bce_with_logits"
	Output        = "output" // a scalar output of the model is the loss
)

// Kinds are the built-in losses, which --loss and model.loss name: the one
// list of them.
var Kinds = []string{MSE, L1, CrossEntropy, BCEWithLogits}

// FlagFor turns model.loss into --loss's form: a built-in loss (KIND or
// KIND:OUTPUT) and output:NAME stay as they are, any other string is the
// name of the model's scalar output that is the loss (output:NAME), so
// model.loss = "total_loss" and "output:total_loss" mean the same.
func FlagFor(modelLoss string) string {
	if _, err := Parse(modelLoss); err == nil {
		return modelLoss
	}
	return Output + ":" + modelLoss
}

// Usage says what --loss and model.loss take (flag help, docs).
const Usage = "mse, l1, cross_entropy or bce_with_logits on the model's first output, KIND:OUTPUT " +
	"(cross_entropy:logits) on another, or output:NAME (or just NAME) for a model that computes its own loss"

// Name is the value every loss is written to.
const Name = "loss"

// Target is the input the loss compares the prediction with: class indices
// (int64, the logits' shape without the class axis) for cross-entropy, a
// tensor shaped like the prediction otherwise.
const Target = "target"

// Spec says which loss to add.
type Spec struct {
	Kind string
	// Output is the model output the loss reads (the prediction), or the
	// scalar output that is the loss for Kind Output; "" is the first output.
	Output string
	// LabelSmoothing mixes the one-hot targets of cross-entropy with the
	// uniform distribution: (1-s)·onehot + s/C, as PyTorch does.
	LabelSmoothing float64
	// SoftTargets makes cross-entropy's target class probabilities shaped
	// as the logits (float), as MixUp and CutMix produce, instead of class
	// indices; label smoothing applies to them as PyTorch's does.
	SoftTargets bool `json:"soft_targets,omitempty"`
}

// Classes is the class count a cross_entropy spec scores over in g (the
// prediction's axis 1); 0 for other losses or an unknown count.
func Classes(g *graph.Graph, spec Spec) int {
	if spec.Kind != CrossEntropy {
		return 0
	}
	pred := spec.Output
	if pred == "" && len(g.Outputs) > 0 {
		pred = g.Outputs[0]
	}
	if pi := g.Info(pred); pi.Known && pi.Rank() >= 2 && pi.Shape[1] > 0 {
		return int(pi.Shape[1])
	}
	return 0
}

// Error is a loss specification ortrain cannot apply.
type Error struct{ Msg string }

func (e *Error) Error() string { return "loss: " + e.Msg }

// BadInput marks the error as the user's to fix (exit code 2).
func (e *Error) BadInput() bool { return true }

// Parse reads the --loss flag: mse, l1, cross_entropy or bce_with_logits,
// each optionally followed by :OUTPUT, the model output it reads (the
// first by default), or output:NAME.
func Parse(s string) (Spec, error) {
	kind, out, named := strings.Cut(s, ":")
	switch {
	case kind == Output && out != "":
		return Spec{Kind: Output, Output: out}, nil
	case slices.Contains(Kinds, kind) && (!named || out != ""):
		return Spec{Kind: kind, Output: out}, nil
	}
	return Spec{}, &Error{fmt.Sprintf("unknown loss %q: want %s, optionally :OUTPUT (cross_entropy:logits) to read an output other than the first, or %s:NAME for the model's own loss",
		s, strings.Join(Kinds, ", "), Output)}
}

// Describe says in words which loss spec adds to a model with these
// outputs and what it reads: for a built-in loss the output (named as the
// first when spec leaves it out) and, where the model has several outputs,
// how to choose another.
func Describe(outputs []string, spec Spec) string {
	if spec.Kind == Output {
		return fmt.Sprintf("the loss is the model's output %q", spec.Output)
	}
	pred := spec.Output
	if pred != "" {
		return fmt.Sprintf("%s reads the output %q", spec.Kind, pred)
	}
	if len(outputs) == 0 {
		return spec.Kind + " has no output to read"
	}
	s := fmt.Sprintf("%s reads the model's first output %q", spec.Kind, outputs[0])
	if len(outputs) > 1 {
		s += fmt.Sprintf(" (choose another with --loss %s:OUTPUT, model.loss = \"%s:OUTPUT\"; the outputs are %s)", spec.Kind, spec.Kind, strings.Join(outputs, ", "))
	}
	return s
}

// Add appends the loss to g, naming it Name, and returns the target inputs
// it added (none for Kind Output). g.Outputs is left alone.
func Add(g *graph.Graph, spec Spec) (targets []string, err error) {
	pred := spec.Output
	if pred == "" {
		if len(g.Outputs) == 0 {
			return nil, &Error{"the model has no outputs"}
		}
		pred = g.Outputs[0]
	}
	if _, ok := g.Infos[pred]; !ok {
		return nil, &Error{fmt.Sprintf("the model has no output (or other value) named %q; its outputs are %s", pred, strings.Join(g.Outputs, ", "))}
	}
	pi := g.Info(pred)
	b := graph.NewBuilder(g, "loss/")
	if spec.Kind == Output {
		if !pi.Known || !pi.Float() || dtype.Numel(pi.Shape) != 1 || pi.Rank() < 0 {
			return nil, &autodiff.LossError{Name: pred, Info: pi}
		}
		if pred == Name && pi.Rank() == 0 {
			return nil, nil // the model's own output is already the loss
		}
		if pi.Rank() > 0 {
			pred = b.Reshape(pred, b.Ints())
		}
		b.OpInto(Name, "Identity", []string{pred})
		return nil, b.Err
	}
	if !pi.Float() || !pi.Known {
		return nil, &Error{fmt.Sprintf("%s, which must be a floating tensor of known rank; it is %v", Describe(g.Outputs, spec), pi)}
	}
	dt := pi.DType
	var l string
	switch spec.Kind {
	case MSE, L1, BCEWithLogits:
		if spec.SoftTargets {
			return nil, &Error{"soft targets are for cross_entropy"}
		}
		g.AddInput(Target, pi)
		g.Dims[Target] = g.Dims[pred]
		d := b.Sub(pred, Target)
		switch spec.Kind {
		case MSE:
			l = b.ReduceMean(b.Mul(d, d), false)
		case L1:
			l = b.ReduceMean(b.Abs(d), false)
		default:
			// max(x,0) - x·t + log(1 + exp(-|x|)): never overflows.
			soft := b.Log(b.Add(b.Scalar(dt, 1), b.Exp(b.Neg(b.Abs(pred)))))
			l = b.ReduceMean(b.Add(b.Sub(b.Relu(pred), b.Mul(pred, Target)), soft), false)
		}
	case CrossEntropy:
		if pi.Rank() < 2 || pi.Shape[1] < 1 {
			msg := fmt.Sprintf("%s, but cross_entropy needs logits [batch, classes, ...] with a static class count, and it is %v", Describe(g.Outputs, spec), pi)
			if pi.Rank() == 3 {
				msg += "; a language model's logits [batch, sequence, vocabulary] need a Transpose to [batch, vocabulary, sequence] in the model (PyTorch's cross_entropy takes the classes on axis 1 too)"
			}
			return nil, &Error{msg}
		}
		c := pi.Shape[1]
		if c == 1 {
			return nil, &Error{fmt.Sprintf("%s, which has 1 class (%v): a softmax over one class is always 1, so the loss would be 0 and nothing would train; for a binary target with one logit use bce_with_logits", Describe(g.Outputs, spec), pi)}
		}
		var onehot string
		if spec.SoftTargets {
			g.AddInput(Target, graph.Info{DType: dt, Known: true, Shape: slices.Clone(pi.Shape)})
			g.Dims[Target] = g.Dims[pred]
			onehot = Target
		} else {
			lshape := append([]int64{pi.Shape[0]}, pi.Shape[2:]...)
			g.AddInput(Target, graph.Info{DType: dtype.Int64, Known: true, Shape: lshape})
			if d := g.Dims[pred]; len(d) > 0 {
				g.Dims[Target] = append([]string{d[0]}, d[min(2, len(d)):]...)
			}
			classes := make([]int64, c)
			for i := range classes {
				classes[i] = int64(i)
			}
			cshape := []int64{1, c}
			for range pi.Shape[2:] {
				cshape = append(cshape, 1)
			}
			onehot = b.Cast(b.Equal(b.Unsqueeze(Target, 1), b.Const(graph.Int64s("", cshape, classes))), dt)
		}
		s := spec.LabelSmoothing
		if s < 0 || s >= 1 {
			return nil, &Error{fmt.Sprintf("label smoothing %g must be in [0, 1)", s)}
		}
		tgt := onehot
		if s > 0 {
			tgt = b.Add(b.Mul(onehot, b.Scalar(dt, 1-s)), b.Scalar(dt, s/float64(c)))
		}
		logp := b.Op("LogSoftmax", []string{pred}, graph.AInt("axis", 1))
		l = b.Neg(b.ReduceMean(b.ReduceSum(b.Mul(tgt, logp), false, 1), false))
	default:
		return nil, &Error{fmt.Sprintf("unknown loss kind %q", spec.Kind)}
	}
	b.OpInto(Name, "Identity", []string{l})
	return []string{Target}, b.Err
}
