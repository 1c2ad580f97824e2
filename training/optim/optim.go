// Package optim builds optimizer graphs: one ONNX graph that takes the
// parameters, their accumulated gradients and the optimizer state, plus the
// learning rate and step as inputs, and returns the updated parameters and
// state and the global gradient norm. AdamW and SGD (momentum, Nesterov,
// weight decay) are supported, with global-norm clipping inside the graph.
package optim

import (
	"fmt"
	"path"
	"strings"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// Kinds of optimizer.
const (
	AdamW = "adamw"
	SGD   = "sgd"
)

// Scalar inputs of the optimizer graph (rank-0 float32).
const (
	LR        = "lr"         // learning rate of this step
	Step      = "step"       // 1 for the first update; AdamW's bias correction reads it
	GradScale = "grad_scale" // multiplies every gradient first: 1/accumulation steps, 1/loss scale
	ClipNorm  = "clip_norm"  // global-norm clipping threshold; <= 0 disables it
	GradNorm  = "grad_norm"  // output: global L2 norm of the scaled gradients, before clipping
	// UpdateFinite is the bool output that says every new parameter is
	// finite: a finite gradient can still overflow the weights (an LR of
	// 1e300), and the trainer then drops the update.
	UpdateFinite = "update_finite"
)

// GradName is the input holding a parameter's accumulated gradient; the
// training graph writes the same tensor (see artifacts).
func GradName(param string) string { return "grad." + param }

// EMAName is the state holding a parameter's moving average.
func EMAName(param string) string { return "ema." + param }

// Out names the output that holds the new value of an input.
func Out(name string) string { return name + ".out" }

// Config holds an optimizer's hyperparameters. LR is only the default the
// manifest records: the graph takes the learning rate as an input.
type Config struct {
	Kind        string  `json:"kind"`
	LR          float64 `json:"lr"`
	WeightDecay float64 `json:"weight_decay"`
	// AdamW.
	Beta1 float64 `json:"beta1,omitempty"`
	Beta2 float64 `json:"beta2,omitempty"`
	Eps   float64 `json:"eps,omitempty"`
	// SGD.
	Momentum float64 `json:"momentum,omitempty"`
	Nesterov bool    `json:"nesterov,omitempty"`
	// NoDecay lists globs of parameters exempt from weight decay. When nil,
	// parameters of rank 0 or 1 (biases, norm scales and shifts) are exempt.
	NoDecay []string `json:"no_decay"`
	// EMADecay keeps an exponential moving average of every parameter,
	// ema ← d·ema + (1−d)·w after each update (a copy of w at the first),
	// as optimizer state EMAName(param); 0 keeps none.
	EMADecay float64 `json:"ema_decay,omitempty"`
	// ClipGroups are name prefixes of parameters clipped apart from the
	// rest: each prefix's gradients are scaled by their own norm, as
	// Lightning clips each optimizer's parameters (a GAN's discriminator
	// and generator). grad_norm stays the norm of all gradients.
	ClipGroups []string `json:"clip_groups,omitempty"`
	// Exact takes every value as given, so that a zero weight decay or
	// momentum means zero rather than "use the default". Callers holding a
	// resolved configuration set it.
	Exact bool `json:"-"`
}

// Defaults fills unset hyperparameters with the usual values: AdamW
// lr 1e-3, betas 0.9/0.999, eps 1e-8, decay 0.01; SGD lr 0.1, momentum 0.9,
// decay 1e-4 (the ResNet recipe). An empty Kind is AdamW. With Exact set
// only Kind is filled.
func (c Config) Defaults() Config {
	if c.Kind == "" {
		c.Kind = AdamW
	}
	if c.Exact {
		return c
	}
	switch c.Kind {
	case AdamW:
		def(&c.LR, 1e-3)
		def(&c.Beta1, 0.9)
		def(&c.Beta2, 0.999)
		def(&c.Eps, 1e-8)
		def(&c.WeightDecay, 0.01)
	case SGD:
		def(&c.LR, 0.1)
		def(&c.Momentum, 0.9)
		def(&c.WeightDecay, 1e-4)
	}
	return c
}

func def(v *float64, d float64) {
	if *v == 0 {
		*v = d
	}
}

// Error is an optimizer setting ortrain rejects.
type Error struct{ Msg string }

func (e *Error) Error() string { return "optim: " + e.Msg }

// BadInput marks the error as the user's to fix (exit code 2).
func (e *Error) BadInput() bool { return true }

// Param is one trained tensor.
type Param struct {
	Name string
	Info graph.Info
}

// State is one optimizer state tensor: zeros of its parameter's shape at
// the start, updated through the output Out(Name).
type State struct {
	Name, Param string
}

// Decays reports whether weight decay applies to a parameter.
func (c Config) Decays(p Param) bool {
	if c.NoDecay == nil {
		return p.Info.Rank() > 1
	}
	for _, g := range c.NoDecay {
		if ok, _ := path.Match(g, p.Name); ok {
			return false
		}
	}
	return true
}

// Build returns the optimizer graph for the parameters and the state
// tensors it reads and writes.
func Build(params []Param, c Config) (*graph.Graph, []State, error) {
	c = c.Defaults()
	if c.Kind != AdamW && c.Kind != SGD {
		return nil, nil, &Error{fmt.Sprintf("unknown optimizer %q: want adamw or sgd", c.Kind)}
	}
	if c.Nesterov && c.Momentum <= 0 {
		return nil, nil, &Error{"nesterov needs momentum > 0"}
	}
	if len(params) == 0 {
		return nil, nil, &Error{"no trainable parameters"}
	}
	if !(c.EMADecay >= 0 && c.EMADecay < 1) {
		return nil, nil, &Error{fmt.Sprintf("ema_decay %v: want 0 (off) or a decay in (0, 1)", c.EMADecay)}
	}
	g := graph.New("optimizer", graph.EmitOpset)
	scalar := graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{}}
	for _, s := range []string{LR, Step, GradScale, ClipNorm} {
		g.AddInput(s, scalar)
	}
	b := graph.NewBuilder(g, "opt/")
	var states []State
	grads := make([]string, len(params))
	var sq []string
	// group[i] is params[i]'s clipping group: 1+j for ClipGroups[j], 0
	// for the rest.
	group := make([]int, len(params))
	for i, p := range params {
		if !p.Info.Float() || !p.Info.Known {
			return nil, nil, &Error{fmt.Sprintf("parameter %q is %v, not a floating tensor", p.Name, p.Info)}
		}
		g.AddInput(p.Name, p.Info)
		g.AddInput(GradName(p.Name), p.Info)
		grads[i] = b.Mul(GradName(p.Name), like(b, GradScale, p))
		sq = append(sq, toFloat32(b, b.Op("ReduceSumSquare", []string{grads[i]}, graph.AInt("keepdims", 0)), p))
		for j, prefix := range c.ClipGroups {
			if strings.HasPrefix(p.Name, prefix) {
				group[i] = 1 + j
				break
			}
		}
	}
	norm := b.Sqrt(b.Sum(sq...))
	b.OpInto(GradNorm, "Identity", []string{norm})
	one := b.Scalar(dtype.Float32, 1)
	clipFactor := func(norm string) string {
		clipped := b.Min(one, b.Div(ClipNorm, b.Add(norm, b.Scalar(dtype.Float32, 1e-6))))
		return b.Where(b.Greater(ClipNorm, b.Scalar(dtype.Float32, 0)), clipped, one)
	}
	factors := map[int]string{}
	for gi := range 1 + len(c.ClipGroups) {
		var members []string
		for i := range params {
			if group[i] == gi {
				members = append(members, sq[i])
			}
		}
		switch {
		case len(members) == 0:
		case len(members) == len(params):
			factors[gi] = clipFactor(norm) // one group: the global norm
		default:
			factors[gi] = clipFactor(b.Sqrt(b.Sum(members...)))
		}
	}

	var bc1, bc2 string
	var zeros []string
	if c.Kind == AdamW {
		// 1 - beta^step, the bias corrections, shared by all parameters.
		bc1 = b.Sub(one, b.Pow(b.Scalar(dtype.Float32, c.Beta1), Step))
		bc2 = b.Sub(one, b.Pow(b.Scalar(dtype.Float32, c.Beta2), Step))
	}
	for i, p := range params {
		gr := b.Mul(grads[i], like(b, factors[group[i]], p))
		k := func(v float64) string { return b.ScalarLike(p.Name, v) }
		lr := like(b, LR, p)
		decay := c.Decays(p) && c.WeightDecay != 0
		var next string
		switch c.Kind {
		case AdamW:
			m, v := "opt.m."+p.Name, "opt.v."+p.Name
			g.AddInput(m, p.Info)
			g.AddInput(v, p.Info)
			states = append(states, State{m, p.Name}, State{v, p.Name})
			m1 := b.OpInto(Out(m), "Add", []string{b.Mul(m, k(c.Beta1)), b.Mul(gr, k(1-c.Beta1))})
			v1 := b.OpInto(Out(v), "Add", []string{b.Mul(v, k(c.Beta2)), b.Mul(b.Mul(gr, gr), k(1-c.Beta2))})
			upd := b.Div(b.Div(m1, like(b, bc1, p)), b.Add(b.Sqrt(b.Div(v1, like(b, bc2, p))), k(c.Eps)))
			if decay {
				// Decoupled: the decay shrinks the weight, it is not added
				// to the gradient the moments see.
				upd = b.Add(upd, b.Mul(p.Name, k(c.WeightDecay)))
			}
			next = b.Sub(p.Name, b.Mul(lr, upd))
		case SGD:
			d := gr
			if decay {
				d = b.Add(d, b.Mul(p.Name, k(c.WeightDecay)))
			}
			if c.Momentum > 0 {
				buf := "opt.momentum." + p.Name
				g.AddInput(buf, p.Info)
				states = append(states, State{buf, p.Name})
				buf1 := b.OpInto(Out(buf), "Add", []string{b.Mul(buf, k(c.Momentum)), d})
				if c.Nesterov {
					d = b.Add(d, b.Mul(buf1, k(c.Momentum)))
				} else {
					d = buf1
				}
			}
			next = b.Sub(p.Name, b.Mul(lr, d))
		}
		b.OpInto(Out(p.Name), "Identity", []string{next})
		if c.EMADecay > 0 {
			ema := EMAName(p.Name)
			g.AddInput(ema, p.Info)
			states = append(states, State{ema, p.Name})
			avg := b.Add(b.Mul(ema, k(c.EMADecay)), b.Mul(next, k(1-c.EMADecay)))
			// The first update copies the weights (the state starts at 0).
			b.OpInto(Out(ema), "Where", []string{b.Less(Step, b.Scalar(dtype.Float32, 1.5)), next, avg})
		}
		// 0·w is 0 for finite w and NaN for ±Inf or NaN: the sum is 0
		// exactly when every new weight is finite, whatever their size.
		zeros = append(zeros, toFloat32(b, b.ReduceSum(b.Mul(next, k(0)), false), p))
	}
	b.OpInto(UpdateFinite, "Not", []string{b.Op("IsNaN", []string{b.Sum(zeros...)})})
	if b.Err != nil {
		return nil, nil, b.Err
	}
	for _, p := range params {
		g.Outputs = append(g.Outputs, Out(p.Name))
	}
	for _, s := range states {
		g.Outputs = append(g.Outputs, Out(s.Name))
	}
	g.Outputs = append(g.Outputs, GradNorm, UpdateFinite)
	return g, states, nil
}

// like casts a float32 scalar to the parameter's type when they differ.
func like(b *graph.Builder, v string, p Param) string {
	if p.Info.DType == dtype.Float32 {
		return v
	}
	return b.Cast(v, p.Info.DType)
}

// toFloat32 casts a reduction of the parameter's type to float32 when they
// differ: a Cast to the same type is a node per tensor for nothing.
func toFloat32(b *graph.Builder, v string, p Param) string {
	if p.Info.DType == dtype.Float32 {
		return v
	}
	return b.Cast(v, dtype.Float32)
}
