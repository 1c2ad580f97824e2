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

// Group is parameters the optimizer graph updates as one tensor: they
// share an element type, weight decay and clipping group, and lie back to
// back (each at an aligned offset, zeros between) in one flat tensor per
// role. A trainer keeps each role's flat tensor as one device allocation and
// gives the training graph views of it, so the update is a handful of
// kernels over a few large tensors, as PyTorch's fused optimizers are,
// rather than a handful per parameter.
type Group struct {
	DType   dtype.DType `json:"dtype"`
	Size    int64       `json:"size"` // elements, padding included
	Members []Member    `json:"members"`
	// Flat are the group's flat tensors, graph inputs whose new values are
	// the outputs Out(Name).
	Flat []Flat `json:"flat"`
}

// Member is one parameter's place in its group's flat tensors.
type Member struct {
	Param  string  `json:"param"`
	Offset int64   `json:"offset"`
	Len    int64   `json:"len"`
	Shape  []int64 `json:"shape"`
}

// Flat is one flat tensor of a group: at each member's offset it holds the
// per-parameter tensor named Prefix+param — the parameter itself for the
// prefix "", its accumulated gradient for "grad.", optimizer state for
// "opt.m." and the like.
type Flat struct {
	Name   string `json:"name"`
	Prefix string `json:"prefix"`
}

// Per-parameter name prefixes of the flat roles.
const (
	paramPrefix    = ""
	gradPrefix     = "grad."
	mPrefix        = "opt.m."
	vPrefix        = "opt.v."
	momentumPrefix = "opt.momentum."
	emaPrefix      = "ema."
)

// alignBytes is where each member starts in a flat tensor: a multiple of
// 256 bytes, the alignment of ONNX Runtime's own CUDA allocations, which
// its vectorised kernels and cuDNN may rely on for a view.
const alignBytes = 256

// groupElems bounds a group's length (a parameter longer than it has a
// group of its own): the update's temporaries are a group long, and on a
// GPU the optimizer's arena keeps what its largest step held. 16M
// elements: a few dozen more kernels for a model of a billion parameters,
// 64 MB float32 temporaries.
const groupElems = 1 << 24

// Layout groups params by element type, weight decay and clipping group,
// in the order they first appear, and places each at an aligned offset; a
// group that would grow past groupElems is closed and another begun.
func (c Config) Layout(params []Param) []Group {
	type key struct {
		dt    dtype.DType
		decay bool
		clip  int
	}
	var groups []Group
	at := map[key]int{}
	for _, p := range params {
		k := key{p.Info.DType, c.Decays(p) && c.WeightDecay != 0, c.clipGroup(p)}
		align := int64(alignBytes / max(p.Info.DType.Size(), 1))
		n := dtype.Numel(p.Info.Shape)
		gi, ok := at[k]
		if !ok || groups[gi].Size > 0 && groups[gi].Size+n > groupElems {
			gi = len(groups)
			at[k] = gi
			groups = append(groups, Group{DType: p.Info.DType})
		}
		g := &groups[gi]
		g.Members = append(g.Members, Member{Param: p.Name, Offset: g.Size, Len: n, Shape: p.Info.Shape})
		g.Size += (n + align - 1) / align * align
	}
	return groups
}

// clipGroup is 1+j for a parameter under ClipGroups[j], 0 for the rest.
func (c Config) clipGroup(p Param) int {
	for j, prefix := range c.ClipGroups {
		if strings.HasPrefix(p.Name, prefix) {
			return 1 + j
		}
	}
	return 0
}

// Pack lays per-parameter values out as the groups' flat tensors: for each
// flat tensor name, Size elements of raw bytes holding value(Prefix+param)
// at each member's offset (zeros where value returns nil, and between
// members). Host-side runs of an optimizer graph feed these.
func Pack(groups []Group, value func(name string) []byte) map[string][]byte {
	out := map[string][]byte{}
	for _, g := range groups {
		size := int64(g.DType.Size())
		for _, f := range g.Flat {
			b := make([]byte, g.Size*size)
			for _, m := range g.Members {
				copy(b[m.Offset*size:(m.Offset+m.Len)*size], value(f.Prefix+m.Param))
			}
			out[f.Name] = b
		}
	}
	return out
}

// Unpack is Pack's inverse: it hands set each per-parameter part of the
// flat tensors in flat (raw bytes by flat name; names absent are skipped).
func Unpack(groups []Group, flat map[string][]byte, set func(name string, b []byte)) {
	for _, g := range groups {
		size := int64(g.DType.Size())
		for _, f := range g.Flat {
			b, ok := flat[f.Name]
			if !ok {
				continue
			}
			for _, m := range g.Members {
				set(f.Prefix+m.Param, b[m.Offset*size:(m.Offset+m.Len)*size])
			}
		}
	}
}

// Build returns the optimizer graph for the parameters, the per-parameter
// state tensors it keeps, and the groups it updates: the graph reads and
// writes each group's flat tensors (Group.Flat), never a parameter alone.
func Build(params []Param, c Config) (*graph.Graph, []State, []Group, error) {
	c = c.Defaults()
	if c.Kind != AdamW && c.Kind != SGD {
		return nil, nil, nil, &Error{fmt.Sprintf("unknown optimizer %q: want adamw or sgd", c.Kind)}
	}
	if c.Nesterov && c.Momentum <= 0 {
		return nil, nil, nil, &Error{"nesterov needs momentum > 0"}
	}
	if len(params) == 0 {
		return nil, nil, nil, &Error{"no trainable parameters"}
	}
	if !(c.EMADecay >= 0 && c.EMADecay < 1) {
		return nil, nil, nil, &Error{fmt.Sprintf("ema_decay %v: want 0 (off) or a decay in (0, 1)", c.EMADecay)}
	}
	for _, p := range params {
		if !p.Info.Float() || !p.Info.Static() {
			return nil, nil, nil, &Error{fmt.Sprintf("parameter %q is %v, not a floating tensor of known shape", p.Name, p.Info)}
		}
	}
	g := graph.New("optimizer", graph.EmitOpset)
	scalar := graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{}}
	for _, s := range []string{LR, Step, GradScale, ClipNorm} {
		g.AddInput(s, scalar)
	}
	b := graph.NewBuilder(g, "opt/")
	groups := c.Layout(params)
	// The per-parameter state prefixes, in the order states are listed.
	var prefixes []string
	switch {
	case c.Kind == AdamW:
		prefixes = []string{mPrefix, vPrefix}
	case c.Momentum > 0:
		prefixes = []string{momentumPrefix}
	}
	if c.EMADecay > 0 {
		prefixes = append(prefixes, emaPrefix)
	}
	var states []State
	for _, p := range params {
		for _, pre := range prefixes {
			states = append(states, State{pre + p.Name, p.Name})
		}
	}
	// flat names group gi's tensor of a role.
	flat := func(gi int, prefix string) string {
		role := strings.TrimSuffix(prefix, ".")
		if role == "" {
			role = "params"
		}
		return fmt.Sprintf("flat%d.%s", gi, role)
	}
	grads := make([]string, len(groups))
	sq := make([]string, len(groups))
	for gi := range groups {
		gr := &groups[gi]
		info := graph.Info{DType: gr.DType, Known: true, Shape: []int64{gr.Size}}
		for _, pre := range append([]string{paramPrefix, gradPrefix}, prefixes...) {
			gr.Flat = append(gr.Flat, Flat{Name: flat(gi, pre), Prefix: pre})
			g.AddInput(flat(gi, pre), info)
		}
		// The sum of squares of the gradients as accumulated, scaled after
		// (grad_scale ≥ 0): no gradient-sized product for it alone. A
		// loss-scaled float16 run's gradients square to at most ~1e10
		// each, far from float32's range.
		grads[gi] = flat(gi, gradPrefix)
		sq[gi] = toFloat32(b, b.Op("ReduceSumSquare", []string{grads[gi]}, graph.AInt("keepdims", 0)), gr.DType)
	}
	// norm of the scaled gradients from sums of squares of unscaled ones.
	normOf := func(sq []string) string { return b.Mul(b.Sqrt(sum(b, sq)), GradScale) }
	norm := b.OpInto(GradNorm, "Identity", []string{normOf(sq)})
	one := b.Scalar(dtype.Float32, 1)
	clipFactor := func(norm string) string {
		clipped := b.Min(one, b.Div(ClipNorm, b.Add(norm, b.Scalar(dtype.Float32, 1e-6))))
		return b.Where(b.Greater(ClipNorm, b.Scalar(dtype.Float32, 0)), clipped, one)
	}
	// Each clipping group's factor, from the norm of its own gradients.
	clipOf := make([]int, len(groups))
	members := map[int][]string{}
	for gi, gr := range groups {
		clipOf[gi] = c.clipGroup(Param{Name: gr.Members[0].Param})
		members[clipOf[gi]] = append(members[clipOf[gi]], sq[gi])
	}
	factors := map[int]string{}
	for ci, m := range members {
		if len(m) == len(groups) {
			factors[ci] = clipFactor(norm) // one clipping group: the global norm
		} else {
			factors[ci] = clipFactor(normOf(m))
		}
	}

	var bc1, bc2 string
	if c.Kind == AdamW {
		// 1 - beta^step, the bias corrections, shared by all parameters.
		bc1 = b.Sub(one, b.Pow(b.Scalar(dtype.Float32, c.Beta1), Step))
		bc2 = b.Sub(one, b.Pow(b.Scalar(dtype.Float32, c.Beta2), Step))
	}
	var zeros []string
	for gi, gr := range groups {
		p := flat(gi, paramPrefix)
		dg := gr.DType
		// Every gradient is multiplied once, by grad_scale × the clipping
		// factor (and AdamW's 1 − β), a scalar made first: one pass over
		// the group where there were two, one gradient-sized value less.
		scale := b.Mul(GradScale, factors[clipOf[gi]])
		scaled := func(extra float64) string {
			f := scale
			if extra != 1 {
				f = b.Mul(scale, b.Scalar(dtype.Float32, extra))
			}
			return b.Mul(grads[gi], like(b, f, dg))
		}
		k := func(v float64) string { return b.Scalar(dg, v) }
		lr := like(b, LR, dg)
		decay := c.Decays(Param{Name: gr.Members[0].Param, Info: graph.Info{Known: true, Shape: gr.Members[0].Shape}}) && c.WeightDecay != 0
		var next string
		switch c.Kind {
		case AdamW:
			m, v := flat(gi, mPrefix), flat(gi, vPrefix)
			// The nodes are written so that ONNX Runtime's order (a
			// depth-first walk entering the input latest in the file
			// first) holds at most two parameter-sized temporaries: the
			// decay first in the file, the first moment after the second.
			var decayed string
			if decay {
				// Decoupled, as PyTorch's AdamW: p·(1 − lr·wd) − lr·m̂/(√v̂ + eps).
				decayed = b.Mul(p, like(b, b.Sub(one, b.Mul(LR, b.Scalar(dtype.Float32, c.WeightDecay))), dg))
			}
			gf := scaled(1)
			v1 := b.OpInto(Out(v), "Add", []string{b.Mul(v, k(c.Beta2)), b.Mul(b.Mul(gf, gf), k(1-c.Beta2))})
			// √(v/bc2) + eps and lr/bc1 with the step's scalars gathered.
			den := b.Add(b.Mul(b.Sqrt(v1), like(b, b.Div(one, b.Sqrt(bc2)), dg)), k(c.Eps))
			m1 := b.OpInto(Out(m), "Add", []string{b.Mul(m, k(c.Beta1)), scaled(1 - c.Beta1)})
			upd := b.Mul(b.Div(m1, den), like(b, b.Div(LR, bc1), dg))
			if decay {
				next = b.OpInto(Out(p), "Sub", []string{decayed, upd})
			} else {
				next = b.OpInto(Out(p), "Sub", []string{p, upd})
			}
		case SGD:
			// μ·buf first in the file, so that ONNX Runtime computes it
			// after d (see AdamW's): two parameter-sized temporaries.
			var kept string
			if c.Momentum > 0 {
				kept = b.Mul(flat(gi, momentumPrefix), k(c.Momentum))
			}
			d := scaled(1)
			if decay {
				d = b.Add(d, b.Mul(p, k(c.WeightDecay)))
			}
			if c.Momentum > 0 {
				buf := flat(gi, momentumPrefix)
				buf1 := b.OpInto(Out(buf), "Add", []string{kept, d})
				if c.Nesterov {
					d = b.Add(d, b.Mul(buf1, k(c.Momentum)))
				} else {
					d = buf1
				}
			}
			next = b.OpInto(Out(p), "Sub", []string{p, b.Mul(lr, d)})
		}
		// next is the output itself: an Identity would copy the whole
		// group once more.
		if c.EMADecay > 0 {
			ema := flat(gi, emaPrefix)
			avg := b.Add(b.Mul(ema, k(c.EMADecay)), b.Mul(next, k(1-c.EMADecay)))
			// The first update copies the weights (the state starts at 0).
			b.OpInto(Out(ema), "Where", []string{b.Less(Step, b.Scalar(dtype.Float32, 1.5)), next, avg})
		}
		// 0·w is 0 for finite w and NaN for ±Inf or NaN: the sum is 0
		// exactly when every new weight is finite, whatever their size.
		zeros = append(zeros, toFloat32(b, b.ReduceSum(b.Mul(next, k(0)), false), dg))
	}
	b.OpInto(UpdateFinite, "Not", []string{b.Op("IsNaN", []string{sum(b, zeros)})})
	if b.Err != nil {
		return nil, nil, nil, b.Err
	}
	for _, gr := range groups {
		for _, f := range gr.Flat {
			if f.Prefix != gradPrefix {
				g.Outputs = append(g.Outputs, Out(f.Name))
			}
		}
	}
	g.Outputs = append(g.Outputs, GradNorm, UpdateFinite)
	return g, states, groups, nil
}

// sum adds scalars; one needs no node.
func sum(b *graph.Builder, xs []string) string {
	if len(xs) == 1 {
		return xs[0]
	}
	return b.Sum(xs...)
}

// like casts a float32 scalar to the group's type when they differ.
func like(b *graph.Builder, v string, dt dtype.DType) string {
	if dt == dtype.Float32 {
		return v
	}
	return b.Cast(v, dt)
}

// toFloat32 casts a reduction of the group's type to float32 when they
// differ: a Cast to the same type is a node for nothing.
func toFloat32(b *graph.Builder, v string, dt dtype.DType) string {
	if dt == dtype.Float32 {
		return v
	}
	return b.Cast(v, dtype.Float32)
}
