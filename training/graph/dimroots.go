package graph

import (
	"math"
	"slices"
	"strings"
)

// Sizes not known before the run (the batch) still have an identity: the
// batch of a block's output is the batch of its input. FoldShapes follows
// it through the ops that keep a dimension as it is, so that a reshape
// whose target reads the batch from one tensor and reshapes another (a
// channel shuffle's view(batch, -1, h, w)) still resolves its -1.

// dimRef names dimension axis of a value.
type dimRef struct {
	value string
	axis  int
}

// Partial shape values hold, for an element not known, either
// unknownElem (a size computed from unknown sizes) or a symbol: the root
// of the dimension it was read from, encoded as symbolBase+index into
// Graph.dimSyms. Both lie in a window far from every special value
// exporters write (INT64_MIN, INT64_MIN+1 and INT64_MAX as slice bounds),
// where no shape arithmetic lands.
const (
	unknownElem = math.MinInt64 / 2
	symbolBase  = unknownElem + 1
	symbolLimit = symbolBase + 1<<32
)

// isUnknownElem reports whether a partial value's element is not known.
func isUnknownElem(v int64) bool { return v >= unknownElem && v < symbolLimit }

// root returns the dimension that dimension axis of value is known to
// equal: itself unless FoldShapes traced it to an earlier one.
func (g *Graph) root(value string, axis int) dimRef {
	if r := g.dimRoots[value]; axis < len(r) && r[axis].value != "" {
		return r[axis]
	}
	return dimRef{value, axis}
}

// symbol encodes dimension d of a Shape's input as a partial element.
func (g *Graph) symbol(d dimRef) int64 {
	if i := slices.Index(g.dimSyms, d); i >= 0 {
		return symbolBase + int64(i)
	}
	if len(g.dimSyms) >= symbolLimit-symbolBase {
		return unknownElem
	}
	g.dimSyms = append(g.dimSyms, d)
	return symbolBase + int64(len(g.dimSyms)-1)
}

// symbolRoot returns the dimension a partial element stands for; ok is
// false for an element computed from unknown sizes.
func (g *Graph) symbolRoot(v int64) (dimRef, bool) {
	i := v - symbolBase
	if !isUnknownElem(v) || i < 0 || i >= int64(len(g.dimSyms)) {
		return dimRef{}, false
	}
	return g.dimSyms[i], true
}

// symbolIs reports whether a partial element stands for dimension d.
func (g *Graph) symbolIs(v int64, d dimRef) bool {
	r, ok := g.symbolRoot(v)
	return ok && r == d
}

// sameDimOps keep every dimension of their first input.
var sameDimOps = func() map[string]bool {
	m := map[string]bool{}
	for _, op := range []string{"Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Identity",
		"Softmax", "LogSoftmax", "Reciprocal", "Erf", "LeakyRelu", "Elu", "Clip", "BatchNormalization",
		"LayerNormalization", "Softplus", "Gelu", "InstanceNormalization", "GroupNormalization", "Dropout",
		"HardSigmoid", "HardSwish", "Mish", "Selu", "Celu", "PRelu", "Cast", "CastLike", "StopGradient", "TrainingOnly",
		"ScatterElements", "ScatterND"} {
		m[op] = true
	}
	return m
}()

// reduceOps reduce their first input over the axes ReduceAxes reads.
var reduceOps = map[string]bool{"ReduceSum": true, "ReduceMean": true, "ReduceSumSquare": true, "ReduceMax": true,
	"ReduceMin": true, "ReduceProd": true, "ReduceL1": true, "ReduceL2": true, "ReduceLogSum": true, "ReduceLogSumExp": true}

// SameShape records that v has the shape of like, an earlier value: a
// gradient has its value's, which no op between them may show (a chunked
// loss's rows reshaped back), and TraceDims then traces v's unknown
// sizes to like's.
func (g *Graph) SameShape(v, like string) {
	if v == like || g.Infos[v].Rank() != g.Infos[like].Rank() || !slices.Contains(g.Infos[v].Shape, -1) {
		return
	}
	if g.shapeLike == nil {
		g.shapeLike = map[string]string{}
	}
	g.shapeLike[v] = like
}

// TraceDims records, for every node in order, which earlier dimension each
// of its output's unknown sizes equals (as FoldShapes does for the graph
// it folds), so that SameDim can match sizes in a graph built after.
func (g *Graph) TraceDims() {
	for _, n := range g.Nodes {
		g.traceDims(n)
	}
}

// traceDims records, for each unknown dimension of n's first output, the
// earlier dimension it equals, where n's op makes that certain.
func (g *Graph) traceDims(n *Node) {
	out := n.Output(0)
	oi := g.Infos[out]
	if out == "" || !oi.Known || !slices.Contains(oi.Shape, -1) {
		return
	}
	xi := g.Infos[n.Input(0)]
	roots := make([]dimRef, len(oi.Shape))
	from := func(a int, in string, axis int) {
		if i := g.Infos[in]; i.Known && axis >= 0 && axis < len(i.Shape) && i.Shape[axis] < 0 {
			roots[a] = g.root(in, axis)
		}
	}
	for a, d := range oi.Shape {
		if d >= 0 {
			continue
		}
		switch {
		case sameDimOps[n.Op] && xi.Rank() == len(oi.Shape):
			from(a, n.Input(0), a)
		case n.Op == "Transpose" && xi.Rank() == len(oi.Shape):
			perm := n.Ints("perm")
			if perm == nil {
				from(a, n.Input(0), len(oi.Shape)-1-a)
			} else if isPerm(perm, len(oi.Shape)) {
				from(a, n.Input(0), int(perm[a]))
			}
		case a == 0 && (n.Op == "Conv" || n.Op == "ConvTranspose" || n.Op == "MaxPool" || n.Op == "AveragePool" ||
			n.Op == "GlobalAveragePool" || n.Op == "GlobalMaxPool" || n.Op == "Flatten" || n.Op == "Gemm" && n.Int("transA", 0) == 0):
			from(a, n.Input(0), 0)
		case n.Op == "MatMul" && xi.Rank() == len(oi.Shape) && a < len(oi.Shape)-1 && g.Infos[n.Input(1)].Rank() == 2:
			from(a, n.Input(0), a)
		case n.Op == "MatMul" && a < len(oi.Shape)-2 && xi.Rank() >= 2 && g.Infos[n.Input(1)].Rank() >= 2:
			// A batch axis of a batched product: the operands' batch
			// axes broadcast as an element-wise op's do.
			g.broadcastRoot(n, roots, a)
		case n.Op == "Concat" || n.Op == "Split":
			if ax, ok := normAxis(n.Int("axis", 0), len(oi.Shape)); ok && int(ax) != a && xi.Rank() == len(oi.Shape) {
				from(a, n.Input(0), a)
			}
		case n.Op == "Add" || n.Op == "Sub" || n.Op == "Mul" || n.Op == "Div" || n.Op == "Pow" ||
			n.Op == "Sum" || n.Op == "Max" || n.Op == "Min" || n.Op == "Mean" || n.Op == "Where":
			g.broadcastRoot(n, roots, a)
		case reduceOps[n.Op] && n.Int("keepdims", 1) == 1 && xi.Rank() == len(oi.Shape):
			// An axis a reduction keeps keeps its dimension.
			if axes, ok := g.ReduceAxes(n); ok && len(axes) > 0 && !slices.Contains(axes, int64(a)) {
				from(a, n.Input(0), a)
			}
		case n.Op == "Pad" && xi.Rank() == len(oi.Shape):
			// An axis padded by nothing keeps its dimension.
			if pads, ok := g.ConstInts(n.Input(1)); ok && len(pads) == 2*len(oi.Shape) && pads[a] == 0 && pads[a+len(oi.Shape)] == 0 && n.Input(3) == "" {
				from(a, n.Input(0), a)
			}
		case n.Op == "Slice" && xi.Rank() == len(oi.Shape):
			// An axis the Slice does not cut keeps its dimension.
			if g.sliceKeeps(n, a, len(oi.Shape)) {
				from(a, n.Input(0), a)
			}
		case n.Op == "Resize" && n.Input(3) != "":
			if t, _, ok := g.shapeVector(n.Input(3)); ok && len(t) == len(oi.Shape) && len(n.Ints("axes")) == 0 {
				if r, ok := g.symbolRoot(t[a]); ok {
					roots[a] = r
				}
			}
		case n.Op == "Reshape":
			if t, _, ok := g.shapeVector(n.Input(1)); ok && len(t) == len(oi.Shape) {
				if r, ok := g.symbolRoot(t[a]); ok {
					roots[a] = r
				} else if t[a] == 0 && n.Int("allowzero", 0) == 0 {
					from(a, n.Input(0), a)
				} else if t[a] == -1 {
					// The -1 is the input's one unknown size where the
					// other sizes on both sides multiply to the same.
					inKnown, inUnknown, _ := g.sizeParts(n.Input(0))
					outKnown, outUnknown, _ := g.sizeParts(out)
					if inUnknown == 1 && outUnknown == 1 && inKnown == outKnown {
						from(a, n.Input(0), slices.Index(xi.Shape, -1))
					}
				}
			}
		}
	}
	if like, ok := g.shapeLike[out]; ok {
		for a, d := range g.Infos[like].Shape {
			if d < 0 && oi.Shape[a] < 0 {
				roots[a] = g.root(like, a)
			}
		}
	}
	if slices.ContainsFunc(roots, func(r dimRef) bool { return r.value != "" }) {
		if g.dimRoots == nil {
			g.dimRoots = map[string][]dimRef{}
		}
		g.dimRoots[out] = roots
	}
	// Split's other outputs share every dimension but the split one.
	if n.Op == "Split" {
		for _, o := range n.Outputs[1:] {
			if i := g.Infos[o]; i.Known && len(i.Shape) == len(roots) && g.dimRoots[out] != nil {
				g.dimRoots[o] = roots
			}
		}
	}
}

// sliceKeeps reports whether Slice n, of rank r, leaves axis a whole: a
// is not among its axes (by default the first len(starts) axes).
func (g *Graph) sliceKeeps(n *Node, a, r int) bool {
	var axes []int64
	if n.Input(3) != "" {
		v, ok := g.ConstInts(n.Input(3))
		if !ok {
			return false
		}
		axes = v
	} else {
		starts, ok := g.ConstInts(n.Input(1))
		if !ok {
			return false
		}
		for i := range starts {
			axes = append(axes, int64(i))
		}
	}
	for _, x := range axes {
		if ax, ok := normAxis(x, r); !ok || int(ax) == a {
			return false
		}
	}
	return true
}

// broadcastRoot traces dimension a of an elementwise op's output: it is
// the inputs' unknown dimension there when every input with an unknown
// size at a has the same root (or roots sameRoot matches) and every other
// input has size 1 (or no such axis). Where the roots differ, the size is
// their broadcast, a function of theirs: recorded as their union (every
// root once, those of earlier unions taken apart), which SameDim matches
// against another's, and no root.
func (g *Graph) broadcastRoot(n *Node, roots []dimRef, a int) {
	r := len(roots)
	var members []dimRef
	for _, in := range n.Inputs {
		i := g.Infos[in]
		if !i.Known {
			return
		}
		ax := a - (r - len(i.Shape))
		switch {
		case ax < 0 || i.Shape[ax] == 1:
		case i.Shape[ax] < 0:
			d := g.root(in, ax)
			if u, ok := g.dimUnions[d]; ok {
				members = append(members, u...)
			} else {
				members = append(members, d)
			}
		default:
			return
		}
	}
	var distinct []dimRef
	for _, m := range members {
		if !slices.ContainsFunc(distinct, func(d dimRef) bool { return g.sameRoot(d, m) }) {
			distinct = append(distinct, m)
		}
	}
	switch len(distinct) {
	case 0:
	case 1:
		roots[a] = distinct[0]
	default:
		slices.SortFunc(distinct, func(x, y dimRef) int {
			if c := strings.Compare(x.value, y.value); c != 0 {
				return c
			}
			return x.axis - y.axis
		})
		if g.dimUnions == nil {
			g.dimUnions = map[dimRef][]dimRef{}
		}
		g.dimUnions[dimRef{n.Output(0), a}] = distinct
	}
}

// sameUnion reports whether two roots are broadcasts of the same roots
// (broadcastRoot's unions; a root that is none is its own).
func (g *Graph) sameUnion(a, b dimRef) bool {
	ua, oka := g.dimUnions[a]
	ub, okb := g.dimUnions[b]
	return oka && okb && slices.Equal(ua, ub)
}

// sameRoot reports whether two roots are the same size: the same
// dimension, or dimensions of graph inputs that share a name (every data
// input's "batch").
func (g *Graph) sameRoot(a, b dimRef) bool {
	if a == b {
		return true
	}
	an, bn := g.Dims[a.value], g.Dims[b.value]
	return a.axis < len(an) && b.axis < len(bn) && an[a.axis] != "" && an[a.axis] == bn[b.axis]
}

// reshapeInferred resolves a Reshape's -1 from partial knowledge: the
// elements of x (sizes) divided by the other elements of target (sizes,
// 0s copying x's, and symbols for unknown dimensions), when the unknown
// dimensions on both sides are the same ones and cancel.
func (g *Graph) reshapeInferred(xv string, x Info, target []int64, neg int, allowZero bool) (int64, bool) {
	if !x.Known {
		return 0, false
	}
	num, den := int64(1), int64(1)
	var ck checked
	var left, right []dimRef
	for i, d := range x.Shape {
		if d < 0 {
			left = append(left, g.root(xv, i))
		} else {
			num = ck.mul(num, d)
		}
	}
	for i, d := range target {
		switch {
		case i == neg:
		case d > 0:
			den = ck.mul(den, d)
		case d == 0 && !allowZero && i < len(x.Shape):
			if x.Shape[i] < 0 {
				right = append(right, g.root(xv, i))
			} else {
				den = ck.mul(den, x.Shape[i])
			}
		default:
			r, ok := g.symbolRoot(d)
			if !ok {
				return 0, false
			}
			right = append(right, r)
		}
	}
	if ck.over || den <= 0 || num%den != 0 || len(left) != len(right) {
		return 0, false
	}
	for _, r := range left {
		i := slices.Index(right, r)
		if i < 0 {
			return 0, false
		}
		right = slices.Delete(right, i, i+1)
	}
	return num / den, true
}

// SameDim reports whether dimension ai of a and dimension bi of b are
// certainly the same size: equal static sizes, or unknown sizes with one
// root (DimRoot: the batch of a model's input, say, followed through the
// Casts mixed precision adds after the dimensions were traced), or with
// roots the model names alike (two inputs' "batch": ONNX declares a
// symbolic dimension one size wherever it appears, and the trainer feeds
// the inputs so).
func (g *Graph) SameDim(a string, ai int, b string, bi int) bool {
	x, y := g.Info(a), g.Info(b)
	if !x.Known || !y.Known || ai < 0 || bi < 0 || ai >= len(x.Shape) || bi >= len(y.Shape) {
		return false
	}
	if x.Shape[ai] >= 0 || y.Shape[bi] >= 0 {
		return x.Shape[ai] == y.Shape[bi]
	}
	av, aa := g.DimRoot(a, ai)
	bv, ba := g.DimRoot(b, bi)
	if av == bv && aa == ba {
		return true
	}
	an, bn := g.Dims[av], g.Dims[bv]
	if aa >= 0 && ba >= 0 && aa < len(an) && ba < len(bn) && an[aa] != "" && an[aa] == bn[ba] {
		return true
	}
	return g.sameUnion(dimRef{av, aa}, dimRef{bv, ba})
}
