package autodiff

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/training/graph"
)

// Recomputation policies: which forward values the backward pass
// recomputes instead of keeping them alive from the forward pass.
const (
	// RecomputeCheap recomputes what a few cheap ops make from values kept
	// anyway (see cheap); it costs a few passes over memory.
	RecomputeCheap = "cheap"
	// RecomputeNone keeps every forward value the backward reads.
	RecomputeNone = "none"
	// RecomputeBlocks is activation checkpointing: only block boundaries
	// are kept, and each block's forward runs again in the backward,
	// just before that block's gradients. About one more forward pass.
	RecomputeBlocks = "blocks"
)

// RecomputePolicies lists the policies, the default first.
var RecomputePolicies = []string{RecomputeCheap, RecomputeNone, RecomputeBlocks}

// cheap are the ops whose result the backward pass recomputes rather than
// keeps from the forward pass: element-wise arithmetic, views and
// normalisations, a pass over memory each, against a Conv or MatMul they
// would sit beside.
var cheap = map[string]bool{
	"Relu": true, "Sigmoid": true, "Tanh": true, "Exp": true, "Log": true, "Sqrt": true, "Neg": true, "Abs": true,
	"Reciprocal": true, "Erf": true, "Gelu": true, "Softplus": true, "Sin": true, "Cos": true, "Cast": true, "Clip": true,
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true, "Where": true, "Max": true, "Min": true,
	"Reshape": true, "Squeeze": true, "Unsqueeze": true, "Flatten": true, "Identity": true, "Transpose": true, "Expand": true,
	"InstanceNormalization": true, "LayerNormalization": true, "Softmax": true, graph.BatchNormTrainingOp: true,
}

// cheapDomain reports whether p's op, cheap by name, is the one of that
// name: an ai.onnx op, ortrain's training BatchNorm, or ONNX Runtime's
// Gelu (autodiff.FuseGelus's, recomputed as the chain it replaced was).
func cheapDomain(p *graph.Node) bool {
	return p.Domain == "" || p.Op == graph.BatchNormTrainingOp || p.Domain == graph.MSDomain && p.Op == "Gelu"
}

// recomputeDepth bounds how many cheap ops deep one recomputation goes.
const recomputeDepth = 4

// repeatable reports whether running n a second time gives the same
// result: not a random op (a second draw would differ) and not control
// flow (whose subgraphs read outer values the copy would not rename).
func repeatable(n *graph.Node) bool {
	if strings.Contains(n.Op, "Random") || strings.Contains(n.Op, "Dropout") {
		return false
	}
	switch n.Op {
	case "Bernoulli", "Multinomial", "If", "Loop", "Scan":
		return false
	}
	return n.Domain == "" || n.Domain == graph.StopGradientDomain
}

// Recompute lowers what the backward pass keeps from the forward pass,
// under policy (one of RecomputePolicies). The first forward nodes of g
// are the forward pass, the rest its backward (as Gradients appends it).
// Recomputed values are bit-identical to the kept ones: the same kernels
// run on the same inputs. Values in keep (graph outputs, alive to the end
// anyway) are left alone. data names the graph inputs that carry the
// batch (all inputs when empty): values computed from them are the
// activations among which blocks finds the block boundaries. It returns
// the forward values the backward no longer reads.
func Recompute(g *graph.Graph, forward int, keep, data map[string]bool, policy string) ([]string, error) {
	r := newRecomputation(g, forward)
	switch policy {
	case RecomputeNone:
		return nil, nil
	case RecomputeCheap:
		r.chooseCheap(keep, data)
	case RecomputeBlocks:
		r.chooseBlocks(keep, data)
		before := len(g.Nodes)
		dropped, err := r.apply()
		if err != nil || len(dropped) == 0 {
			return dropped, err
		}
		// A block's backward reads its recomputed values as the plain
		// backward reads the forward's: thin them with the cheap policy
		// too, the copies counting as forward nodes.
		c := newRecomputation(g, forward+len(g.Nodes)-before)
		c.chooseCheap(keep, data)
		_, err = c.apply()
		return dropped, err
	default:
		return nil, fmt.Errorf("autodiff: recompute policy %q is not one of %s", policy, strings.Join(RecomputePolicies, ", "))
	}
	return r.apply()
}

type recomputation struct {
	g       *graph.Graph
	forward int
	prod    map[string]*graph.Node // forward values by their producer
	isSaved map[string]bool        // forward values the backward reads
	saved   []string               // the same, in forward order
	kept    map[string]bool        // saved or not, values the backward may read as they are
	dropped map[string]bool        // saved values recomputed instead
}

func newRecomputation(g *graph.Graph, forward int) *recomputation {
	r := &recomputation{g: g, forward: forward, prod: map[string]*graph.Node{}, isSaved: map[string]bool{},
		kept: map[string]bool{}, dropped: map[string]bool{}}
	for _, n := range g.Nodes[:forward] {
		for _, o := range n.Outputs {
			if o != "" {
				r.prod[o] = n
			}
		}
	}
	for _, n := range g.Nodes[forward:] {
		for _, in := range n.Inputs {
			if r.prod[in] != nil {
				r.isSaved[in] = true
			}
		}
	}
	for _, n := range g.Nodes[:forward] {
		for _, o := range n.Outputs {
			if r.isSaved[o] {
				r.saved = append(r.saved, o)
			}
		}
	}
	return r
}

// given reports whether v needs no recomputation: a graph input, an
// initializer or a constant, or a value kept.
func (r *recomputation) given(v string) bool {
	p := r.prod[v]
	return v == "" || p == nil || p.Op == "Constant" || r.kept[v]
}

// chooseCheap drops the saved values a few cheap ops make from values
// kept anyway, but for those not computed from the batch: a weight's Casts
// to the compute type are as large as the weight, not as the batch, and
// recomputing them in the backward would only add nodes (#31).
func (r *recomputation) chooseCheap(keep, data map[string]bool) {
	activation := r.activations(data)
	for _, v := range r.saved {
		r.kept[v] = true
	}
	var recomputable func(v string, depth int) bool
	recomputable = func(v string, depth int) bool {
		p := r.prod[v]
		if depth == 0 || p == nil || !cheap[p.Op] || len(p.Outputs) != 1 || !cheapDomain(p) {
			return false
		}
		for _, in := range p.Inputs {
			if !r.given(in) && !recomputable(in, depth-1) {
				return false
			}
		}
		return true
	}
	for _, v := range r.saved {
		if keep[v] || !activation[v] {
			continue
		}
		r.kept[v] = false
		switch narrow := r.narrowSource(v); {
		case recomputable(v, recomputeDepth):
			r.dropped[v] = true
		case narrow != "":
			r.kept[narrow], r.dropped[v] = true, true
		default:
			r.kept[v] = true
		}
	}
}

// narrowSource is u where v = Cast(u) widens a float (a float16
// convolution output that a float32 normalisation reads): keeping u and
// casting again in the backward holds half the bytes. "" otherwise.
func (r *recomputation) narrowSource(v string) string {
	p := r.prod[v]
	if p == nil || p.Op != "Cast" || !repeatable(p) {
		return ""
	}
	u := p.Input(0)
	from, to := r.g.Info(u), r.g.Info(v)
	if !from.Float() || !to.Float() || from.DType.Size() >= to.DType.Size() {
		return ""
	}
	return u
}

// chooseBlocks keeps block boundaries (see boundaries), the outputs of
// nodes that cannot run twice and keep; every other saved value is
// recomputed from them.
func (r *recomputation) chooseBlocks(keep, data map[string]bool) {
	for v := range keep {
		r.kept[v] = true
	}
	for _, v := range r.boundaries(data) {
		r.kept[v] = true
	}
	for _, n := range r.g.Nodes[:r.forward] {
		if !repeatable(n) {
			for _, o := range n.Outputs {
				r.kept[o] = true
			}
		}
	}
	for _, v := range r.saved {
		if !r.kept[v] {
			r.dropped[v] = true
		}
	}
}

// boundaries picks the block boundaries: activations (values computed
// from the batch inputs) at which the forward pass narrows to one value,
// the residual stream between two blocks for instance: the activations
// alive beside it, all together, are under 1/32 of its size (a
// transformer's time conditioning, not its attention scores). They are
// spaced so that the bytes saved between two of them are about √(all saved
// bytes × a boundary's bytes): Chen et al.'s √n checkpointing, which
// balances the boundaries kept against the one block recomputed at a time.
func (r *recomputation) boundaries(data map[string]bool) []string {
	nodes := r.g.Nodes[:r.forward]
	last := map[string]int{} // last forward reader
	for i, n := range nodes {
		for _, in := range n.Inputs {
			last[in] = i
		}
	}
	activation := r.activations(data)
	bytes := func(v string) float64 {
		info := r.g.Info(v)
		if !info.Known {
			return 0
		}
		n := float64(info.DType.Size())
		for _, d := range info.Shape {
			if d < 0 {
				d = 64 // a symbolic size: what matters is the ratio between values
			}
			n *= float64(d)
		}
		return n
	}
	var candidates []string
	at := map[string]int{}
	live := 0.0 // bytes of the activations crossing from node i to later ones
	ends := map[int][]string{}
	for _, in := range r.g.Inputs { // the batch crosses until its last reader
		if j, ok := last[in]; ok && activation[in] {
			live += bytes(in)
			ends[j] = append(ends[j], in)
		}
	}
	for i, n := range nodes {
		var born []string
		for _, o := range n.Outputs {
			if j, ok := last[o]; ok && o != "" && j > i && activation[o] {
				live += bytes(o)
				ends[j] = append(ends[j], o)
				born = append(born, o)
			}
		}
		for _, v := range ends[i] {
			live -= bytes(v)
		}
		for _, o := range born {
			if b := bytes(o); b > 0 && 32*(live-b) < b {
				candidates = append(candidates, o)
				at[o] = i
			}
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	var total, each float64
	for _, v := range r.saved {
		total += bytes(v)
	}
	for _, v := range candidates {
		each += bytes(v)
	}
	budget := math.Sqrt(total * each / float64(len(candidates)))
	var out []string
	acc, next := 0.0, 0
	for i, n := range nodes {
		for _, o := range n.Outputs {
			if r.isSaved[o] {
				acc += bytes(o)
			}
		}
		if next < len(candidates) && at[candidates[next]] == i {
			if acc >= budget {
				out = append(out, candidates[next])
				acc = 0
			}
			next++
		}
	}
	return out
}

// activations marks the forward values computed from the graph inputs
// in data (all inputs when data is empty), the batch.
func (r *recomputation) activations(data map[string]bool) map[string]bool {
	activation := map[string]bool{}
	for _, in := range r.g.Inputs {
		activation[in] = data[in] || len(data) == 0
	}
	for _, n := range r.g.Nodes[:r.forward] {
		fromData := false
		for _, in := range n.Inputs {
			fromData = fromData || activation[in]
		}
		for _, o := range n.Outputs {
			activation[o] = fromData
		}
	}
	return activation
}

// apply emits the recomputations in forward order, each node once and
// reading the others' copies, and points the backward at them.
func (r *recomputation) apply() ([]string, error) {
	if len(r.dropped) == 0 {
		return nil, nil
	}
	need := map[*graph.Node]bool{}
	var mark func(v string)
	mark = func(v string) {
		p := r.prod[v]
		if need[p] {
			return
		}
		need[p] = true
		for _, in := range p.Inputs {
			if !r.given(in) {
				mark(in)
			}
		}
	}
	for v := range r.dropped {
		mark(v)
	}
	forward, backward := slices.Clone(r.g.Nodes[:r.forward]), slices.Clone(r.g.Nodes[r.forward:])
	clone := map[string]string{}
	for _, n := range r.g.Nodes[:r.forward] {
		if !need[n] {
			continue
		}
		c := n.Clone()
		c.Name = r.g.Fresh(n.Name + "/recompute")
		for i, in := range c.Inputs {
			if cl, ok := clone[in]; ok {
				c.Inputs[i] = cl
			}
		}
		for i, o := range c.Outputs {
			if o != "" {
				c.Outputs[i] = r.g.Fresh(o + "/recompute")
				clone[o] = c.Outputs[i]
			}
		}
		r.g.AddNode(c)
	}
	// The copies go between the forward and the backward nodes. ONNX
	// Runtime orders a node's producers depth-first, the one latest in the
	// file first (see memplan.Order): a gradient input, later in the file,
	// is then computed before the copies beside it, so a block is
	// recomputed just before its gradients need it, not at the start of
	// the backward pass.
	copies := r.g.Nodes[len(forward)+len(backward):]
	r.g.Nodes = slices.Concat(forward, copies, backward)
	for _, n := range backward {
		for i, in := range n.Inputs {
			if r.dropped[in] {
				n.Inputs[i] = clone[in]
			}
		}
	}
	var out []string
	for _, v := range r.saved {
		if r.dropped[v] {
			out = append(out, v)
		}
	}
	return out, nil
}
