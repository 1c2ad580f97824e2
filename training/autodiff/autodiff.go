// Package autodiff derives the backward pass of an ONNX graph: reverse-mode
// differentiation of a scalar loss with respect to chosen values (usually
// the parameters), emitted as ordinary ONNX nodes that stock ONNX Runtime
// runs. There is one gradient rule per op type, in rules.go, written with
// graph.Builder; broadcasting is undone by the builder's ReduceSumTo, never
// inside a rule.
//
// Gradients flow only along floating values produced by differentiable ops:
// Shape, comparisons, ArgMax, integer casts and the like cut the path, as
// does the stop-gradient marker (graph.StopGradientOp in the ortrain
// domain), and nodes that do not lie between a wanted value and the loss
// get no backward nodes at all. The markers stay in the graph; callers strip
// them (Graph.StripStopGradients) before handing it to ONNX Runtime.
package autodiff

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/training/graph"
)

// Rule emits the gradients of a node's inputs given the gradients of its
// outputs. dy[i] is "" where output i gets no gradient; need[i] says
// whether input i wants one. It returns one entry per input ("" for none).
type Rule func(b *graph.Builder, n *graph.Node, dy []string, need []bool) []string

// nonDiff are the ops whose float outputs, if any, do not vary with their
// inputs, or only by steps (zero gradient almost everywhere, as PyTorch
// also gives), each with the reason. Ops with integer or bool outputs
// carry no gradient by type and need no entry. An op in neither this
// table nor the rules is unsupported: Gradients refuses it on a path to
// the loss.
var nonDiff = map[string]string{
	"Shape": "the output is the input's shape", "Size": "the output is the input's element count",
	"Equal": "comparison (bool output)", "Greater": "comparison (bool output)", "Less": "comparison (bool output)",
	"GreaterOrEqual": "comparison (bool output)", "LessOrEqual": "comparison (bool output)",
	"Not": "logic (bool)", "And": "logic (bool)", "Or": "logic (bool)", "Xor": "logic (bool)",
	"ArgMax": "index output", "ArgMin": "index output", "NonZero": "index output",
	"IsNaN": "bool output", "IsInf": "bool output",
	"Sign": "piecewise constant: zero gradient almost everywhere", "Floor": "piecewise constant: zero gradient almost everywhere",
	"Ceil": "piecewise constant: zero gradient almost everywhere", "Round": "piecewise constant: zero gradient almost everywhere",
	"ConstantOfShape": "reads only a shape", "Range": "reads only scalars that set a length", "EyeLike": "reads only a shape",
	"OneHot": "piecewise constant in its indices", "Constant": "no inputs",
	"Hardmax":      "piecewise constant: a one-hot of the maximum",
	"RandomNormal": "random, no inputs", "RandomUniform": "random, no inputs",
	"RandomNormalLike": "random: reads only the input's shape and type", "RandomUniformLike": "random: reads only the input's shape and type",
	"Bernoulli": "random draw (piecewise constant in the probabilities)", "Multinomial": "random draw (index output)",
}

// nonDiffOp reports whether n is in nonDiff (standard ops only).
func nonDiffOp(n *graph.Node) bool {
	_, ok := nonDiff[n.Op]
	return ok && n.Domain == ""
}

// NonDifferentiable returns the ops without a gradient by nature, each with
// the reason (for the op table).
func NonDifferentiable() map[string]string { return maps.Clone(nonDiff) }

// NoRuleError is an op on the path from a trained value to the loss that
// ortrain cannot differentiate.
type NoRuleError struct {
	Op, Node string
	Params   []string // trained values upstream of the node, for the hint
}

func (e *NoRuleError) Error() string {
	hint := ""
	if len(e.Params) > 0 {
		ps := e.Params
		if len(ps) > 4 {
			ps = append(slices.Clone(ps[:4]), "...")
		}
		hint = " (it depends on " + strings.Join(ps, ", ") + ")"
	}
	return fmt.Sprintf("autodiff: no gradient rule for op %s at node %q%s: freeze the parameters that feed it with --frozen GLOB, or cut the gradient before it: stop_gradient(x) from models/pytorch/ortrain_export.py in the model (.detach() vanishes in export), or --stop-gradient NAME", e.Op, e.Node, hint)
}

// BadInput marks the error as the user's to fix (exit code 2).
func (e *NoRuleError) BadInput() bool { return true }

// RuleError is a node whose rule cannot build its gradient as the graph
// stands: a shape it needs is not known, an attribute it does not cover.
type RuleError struct {
	Node string
	Err  error
}

func (e *RuleError) Error() string {
	msg := fmt.Sprintf("autodiff: gradient of %s: %v", e.Node, e.Err)
	if s := e.Err.Error(); strings.Contains(s, "static") || strings.Contains(s, "known") || strings.Contains(s, "fixed") {
		msg += "; fix the model's input sizes with --input-shape NAME=D1xD2x... (config [model.input_shapes]), -1 keeping a dimension free"
	}
	return msg
}

func (e *RuleError) Unwrap() error { return e.Err }

// BadInput marks the error as the user's to fix (exit code 2).
func (e *RuleError) BadInput() bool { return true }

// LossError is a loss that is not a floating scalar.
type LossError struct {
	Name string
	Info graph.Info
}

func (e *LossError) Error() string {
	if !e.Info.Known && (e.Info.Float() || e.Info.DType == 0) {
		return fmt.Sprintf("autodiff: the loss %q must be a floating scalar (one element), and ortrain cannot tell its shape: "+
			"the ops before it give a result whose rank or size depends on the data (NonMaxSuppression, NonZero...) or that shape inference does not follow; "+
			"make it a scalar in the model (a Reshape to shape [], or ReduceSum/ReduceMean over all axes with keepdims=0) or pick another output", e.Name)
	}
	return fmt.Sprintf("autodiff: the loss %q must be a floating scalar (one element), it is %v; reduce it (e.g. ReduceMean) or pick another output", e.Name, e.Info)
}

// BadInput marks the error as the user's to fix (exit code 2).
func (e *LossError) BadInput() bool { return true }

// Has reports whether op has a gradient rule.
func Has(op string) bool {
	_, ok := rules[op]
	return ok
}

// Ops lists the op types with a gradient rule.
func Ops() []string {
	var ops []string
	for op := range rules {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	return ops
}

// Gradients appends to g the nodes computing d loss / d w for each w in wrt
// and returns the gradient's value name per w; a w the loss does not depend
// on gets zeros. New values are named under prefix.
func Gradients(g *graph.Graph, loss string, wrt []string, prefix string) (map[string]string, error) {
	f := analyse(g, loss, wrt)
	active, reach, origin, path := f.active, f.reach, f.origin, f.path
	// An op without a rule is named first: it is also why a loss it feeds
	// may have no known type.
	for _, n := range path {
		if ruleFor(n) == nil {
			var ps []string
			for _, in := range n.Inputs {
				ps = append(ps, origin[in]...)
			}
			slices.Sort(ps)
			return nil, &NoRuleError{Op: n.Op, Node: n.Name, Params: slices.Compact(ps)}
		}
	}
	li := g.Info(loss)
	if !li.Known || !li.Float() || numel(li.Shape) != 1 {
		return nil, &LossError{loss, li}
	}

	b := graph.NewBuilder(g, prefix)
	backward := len(g.Nodes)
	grads := map[string][]string{}
	if active[loss] {
		one, err := graph.Floats("", li.DType, li.Shape, []float64{1})
		if err != nil {
			return nil, err
		}
		grads[loss] = []string{b.Const(one)}
	}
	// add records a contribution d to v's gradient, which has v's shape
	// (graph.SameShape: later rewrites may rely on it where no op shows it).
	add := func(v, d string) {
		grads[v] = append(grads[v], d)
		g.SameShape(d, v)
	}
	total := func(v string) string {
		gs := grads[v]
		if len(gs) == 0 {
			return ""
		}
		s := b.Sum(gs...)
		grads[v] = []string{s} // fan-out summed once
		g.SameShape(s, v)
		return s
	}
	prod := g.Producers()
	consumers := g.Consumers() // the forward graph's, before the backward's reads
	readers, outputs := readerCounts(g)
	for _, n := range path { // reverse topological order
		dy := make([]string, len(n.Outputs))
		got := false
		for i, o := range n.Outputs {
			if active[o] {
				dy[i] = total(o)
				got = got || dy[i] != ""
			}
		}
		// A node whose outputs get no gradient passes none on: the inner
		// nodes of a pattern differentiated as a whole (normfuse.go).
		if !got {
			continue
		}
		if c, ok := normPattern(g, n, prod, readers, outputs, active); ok {
			if active[c.x] && reach[c.x] {
				add(c.x, normChainGrad(b, n, c, dy[0]))
			}
			continue
		}
		if c, ok := geluPattern(g, n, prod, readers, outputs); ok {
			if active[c.x] && reach[c.x] {
				add(c.x, geluChainGrad(b, c, dy[0]))
			}
			continue
		}
		need := make([]bool, len(n.Inputs))
		for i, in := range n.Inputs {
			need[i] = in != "" && active[in] && reach[in]
		}
		if need[0] {
			if ls, d := logSoftmaxGatherGrad(b, g, n, prod, readers, outputs, dy[0]); d != "" {
				if active[x(ls)] && reach[x(ls)] {
					add(x(ls), d)
				}
				continue
			}
		}
		if n.Op == "Softmax" && need[0] && dy[0] != "" {
			if sp, ok := softmaxIntoProduct(g, n, consumers, readers, outputs, total); ok {
				add(x(n), b.Mul(y(n), sp.shiftedGrad(b, g, y(n), dy[0])))
				continue
			}
		}
		dx := ruleFor(n)(b, n, dy, need)
		if b.Err != nil {
			return nil, &RuleError{Node: n.Describe(), Err: b.Err}
		}
		for i, d := range dx {
			if i < len(need) && need[i] && d != "" {
				add(n.Inputs[i], d)
			}
		}
	}
	out := map[string]string{}
	for _, w := range wrt {
		if d := total(w); d != "" {
			out[w] = d
		} else {
			out[w] = b.ZerosLike(w)
		}
	}
	foldExpands(g, backward, out)
	foldReduceSums(g, backward, out, prefix)
	rowScaleThroughGemm(g, backward)
	fullOperandFirst(g, backward)
	earliestContributionLast(g, backward)
	if b.Err != nil {
		return nil, b.Err
	}
	return out, batchScaledGradients(g, backward, out)
}

// earliestContributionLast reorders the backward nodes (from index first
// on) so that the nodes computing each contribution to a gradient sum,
// and only it, sit just before the Sum, the earliest contribution last.
// ONNX Runtime's default order walks a node's producers depth-first, the
// one latest in the file first (see memplan.Order): a weight shared by
// the input embedding and the output head would otherwise get its head
// contribution computed after the whole backward pass, which keeps the
// logits' gradient alive until then. The order stays topological.
func earliestContributionLast(g *graph.Graph, first int) {
	readers := map[string][]*graph.Node{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			readers[in] = append(readers[in], n)
		}
	}
	outputs := g.OutputSet()
	prod := map[string]*graph.Node{}
	for _, n := range g.Nodes[first:] {
		for _, o := range n.Outputs {
			prod[o] = n
		}
	}
	moved := map[*graph.Node]bool{}
	chains := map[*graph.Node][][]*graph.Node{} // per Sum, per contribution
	for _, s := range g.Nodes[first:] {
		if s.Op != "Sum" || s.Domain != "" {
			continue
		}
		for _, c := range s.Inputs {
			chain := map[*graph.Node]bool{}
			var add func(v string)
			add = func(v string) {
				p := prod[v]
				if p == nil || p.Op == "Sum" || chain[p] || moved[p] {
					return
				}
				for _, o := range p.Outputs {
					if outputs[o] {
						return
					}
					for _, r := range readers[o] {
						if r != s && !chain[r] {
							return
						}
					}
				}
				chain[p] = true
				for _, in := range p.Inputs {
					add(in)
				}
			}
			add(c)
			var nodes []*graph.Node
			for _, n := range g.Nodes[first:] {
				if chain[n] {
					nodes = append(nodes, n)
					moved[n] = true
				}
			}
			chains[s] = append(chains[s], nodes)
		}
	}
	if len(moved) == 0 {
		return
	}
	order := slices.Clone(g.Nodes[:first])
	for _, n := range g.Nodes[first:] {
		if moved[n] {
			continue
		}
		cs := chains[n]
		for i := len(cs) - 1; i >= 0; i-- {
			order = append(order, cs[i]...)
		}
		order = append(order, n)
	}
	g.Nodes = order
}

// fullOperandFirst swaps the operands of the backward's Mul and Add nodes
// (from index first on) whose first operand is broadcast and whose second
// already has the result's shape. ONNX Runtime may write an element-wise
// result over its first input when that input dies there, so the product
// of a gradient with a forward value that dies at it (Exp's output times
// the broadcast gradient of its sum) then needs no new buffer. Both ops
// commute exactly in floating point.
func fullOperandFirst(g *graph.Graph, first int) {
	// smaller reports whether v is provably smaller than the result of shape out.
	smaller := func(v graph.Info, out graph.Info) bool {
		if !v.Known || !out.Known {
			return false
		}
		if v.Rank() < out.Rank() {
			return true
		}
		for i, d := range v.Shape {
			if d == 1 && out.Shape[i] != 1 {
				return true
			}
		}
		return false
	}
	for _, n := range g.Nodes[first:] {
		if (n.Op != "Mul" && n.Op != "Add") || n.Domain != "" || len(n.Inputs) != 2 {
			continue
		}
		out := g.Info(n.Outputs[0])
		a, c := g.Info(n.Inputs[0]), g.Info(n.Inputs[1])
		if smaller(a, out) && c.Known && c.Rank() == out.Rank() && !smaller(c, out) {
			n.Inputs[0], n.Inputs[1] = n.Inputs[1], n.Inputs[0]
		}
	}
}

// flow is which values depend on the wanted ones and which the loss
// depends on.
type flow struct {
	active map[string]bool     // values that depend on a wanted value
	origin map[string][]string // the wanted values each active value depends on
	reach  map[string]bool     // active values the loss depends on
	path   []*graph.Node       // nodes from the wanted values to the loss, in reverse order
}

func analyse(g *graph.Graph, loss string, wrt []string) flow {
	// Forward: which values depend on a wanted value (through floats).
	active := map[string]bool{}
	origin := map[string][]string{} // the wanted values each active value depends on
	for _, w := range wrt {
		if g.Info(w).Float() {
			active[w] = true
			origin[w] = []string{w}
		}
	}
	for _, n := range g.Nodes {
		// The stop-gradient marker cuts here, and so do the ops whose
		// outputs do not vary with their inputs. Every other op carries
		// the dependence on to its float outputs, and to outputs whose
		// type inference did not find: such an op without a rule is then
		// refused below rather than cutting the gradient to a silent zero.
		if nonDiffOp(n) || graph.IsStopGradient(n) {
			continue
		}
		var from []string
		for _, in := range n.Inputs {
			if active[in] {
				from = append(from, origin[in]...)
			}
		}
		if from == nil {
			continue
		}
		slices.Sort(from)
		from = slices.Compact(from)
		for _, o := range n.Outputs {
			if info := g.Info(o); o != "" && (info.Float() || info.DType == 0) {
				active[o] = true
				origin[o] = from
			}
		}
	}
	// Backward: which values the loss depends on.
	reach := map[string]bool{loss: true}
	var path []*graph.Node
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := g.Nodes[i]
		hit := false
		for _, o := range n.Outputs {
			if reach[o] && active[o] {
				hit = true
			}
		}
		if !hit {
			continue
		}
		path = append(path, n)
		for _, in := range n.Inputs {
			if active[in] {
				reach[in] = true
			}
		}
	}
	return flow{active, origin, reach, path}
}

// Unreached returns the values of wrt the loss does not depend on through
// differentiable ops: their gradient would be zero whatever the data.
func Unreached(g *graph.Graph, loss string, wrt []string) []string {
	f := analyse(g, loss, wrt)
	var out []string
	for _, w := range wrt {
		if !f.reach[w] {
			out = append(out, w)
		}
	}
	return out
}

// broadcasting are the element-wise ops whose inputs broadcast.
var broadcasting = map[string]bool{"Add": true, "Sub": true, "Mul": true, "Div": true}

// foldExpands lets broadcasting do what an Expand in the backward nodes
// (from index first on) would: when every reader of the Expand's output is
// an element-wise op whose other operand already has the expanded shape
// (it is the value whose shape the Expand takes, or both are the same
// static shape), the readers take the Expand's input instead. A reduction's
// gradient followed by the product with the reduced tensor (Exp's, a
// softmax's) then no longer materialises a full-size copy of the gradient.
// The results are the same numbers.
func foldExpands(g *graph.Graph, first int, outputs map[string]string) {
	readers := map[string][]*graph.Node{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			readers[in] = append(readers[in], n)
		}
	}
	prod := g.Producers()
	kept := map[string]bool{}
	for _, v := range outputs {
		kept[v] = true
	}
	for _, o := range g.Outputs {
		kept[o] = true
	}
	for _, e := range g.Nodes[first:] {
		if e.Op != "Expand" || e.Domain != "" || len(readers[e.Outputs[0]]) == 0 || kept[e.Outputs[0]] {
			continue
		}
		x, y := e.Inputs[0], e.Outputs[0]
		xi, yi := g.Info(x), g.Info(y)
		if !xi.Known || !yi.Known || xi.Rank() > yi.Rank() {
			continue
		}
		// like is the value whose runtime shape e takes, when it is Shape(like).
		like := ""
		if p := prod[e.Inputs[1]]; p != nil && p.Op == "Shape" && len(p.Attrs) == 0 {
			like = p.Inputs[0]
		}
		full := func(v string) bool {
			if v == like {
				return true
			}
			vi := g.Info(v)
			return yi.Static() && vi.Known && vi.Static() && slices.Equal(vi.Shape, yi.Shape)
		}
		ok := true
		for _, r := range readers[y] {
			if !broadcasting[r.Op] || r.Domain != "" || len(r.Inputs) != 2 || r.Inputs[0] == r.Inputs[1] {
				ok = false
				break
			}
			other := r.Inputs[0]
			if other == y {
				other = r.Inputs[1]
			}
			if !full(other) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		for _, r := range readers[y] {
			for i, in := range r.Inputs {
				if in == y {
					r.Inputs[i] = x
				}
			}
		}
		readers[x] = append(readers[x], readers[y]...)
		readers[y] = nil
	}
}

// ruleFor returns the rule for n's op, nil if there is none. ai.onnx and
// com.microsoft ops are found by op type, ortrain's own by "ortrain.Op".
func ruleFor(n *graph.Node) Rule {
	if n.Domain == graph.StopGradientDomain {
		return rules[n.Domain+"."+n.Op]
	}
	return rules[n.Op]
}

func numel(s []int64) int64 {
	p := int64(1)
	for _, d := range s {
		p *= d
	}
	return p
}

// Backward emits the backward of one node with the rule registered for its
// op type: the gradients of n's inputs given those of its outputs (dy[i] ""
// for none) for the inputs marked in need. It lets the import of ONNX
// Runtime's training graphs lower their *Grad ops through the same rules.
func Backward(b *graph.Builder, n *graph.Node, dy []string, need []bool) ([]string, error) {
	r := ruleFor(n)
	if r == nil {
		return nil, &NoRuleError{Op: n.Op, Node: n.Name}
	}
	dx := r(b, n, dy, need)
	if b.Err != nil {
		return nil, &RuleError{Node: n.Describe(), Err: b.Err}
	}
	return dx, nil
}
