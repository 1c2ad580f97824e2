package graph

import (
	"math"
	"slices"

	"github.com/ortrain/ortrain/dtype"
)

// inferRule sets the facts of a node's outputs from its inputs' facts. Rules
// read nodes from model files, so they must check what they index (input
// counts, axes, permutations, attribute lengths) and compute sizes with
// checked arithmetic: a malformed node gets unknown facts, never a panic.
type inferRule func(c *inferCtx)

// inferRules maps an op type to its shape rule; ops missing here leave their
// outputs' facts as they are (value_info from the file may fill them in).
// To teach inference an op, add its name to the group sharing its rule, or
// register a new rule (in infer_ops.go or beside its family) below.
var inferRules = func() map[string]inferRule {
	rules := map[string]inferRule{}
	add := func(r inferRule, ops ...string) {
		for _, op := range ops {
			if _, dup := rules[op]; dup {
				panic("graph: two shape rules for " + op)
			}
			rules[op] = r
		}
	}
	add(inferSame, "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Sign", "Identity",
		"Softmax", "LogSoftmax", "Reciprocal", "Erf", "LeakyRelu", "Elu", "Floor", "Ceil", "Round", "Clip",
		"BatchNormTraining", "Softplus", "Gelu", "FastGelu", "Sin", "Cos",
		"InstanceNormalization", "GroupNormalization", "Trilu", "StopGradient", "UpdateBuffer", "TrainingOnly", "Not", "Celu", "Selu", "HardSigmoid", "HardSwish", "Mish", "Softsign",
		"ThresholdedRelu", "Shrink", "PRelu", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
		"LRN", "LpNormalization", "MeanVarianceNormalization", "Hardmax", "CumSum",
		"ScatterElements", "ScatterND")
	add(inferBatchNorm, "BatchNormalization")
	add(inferLayerNorm, "LayerNormalization")
	add(inferDropout, "Dropout")
	add(inferCast, "Cast")
	add(inferCastLike, "CastLike")
	add(inferIsNaN, "IsNaN", "IsInf")
	add(broadcastRule(2, inputType), "Add", "Sub", "Mul", "Div", "Pow", "Mod")
	add(broadcastRule(1, inputType), "Max", "Min", "Sum", "Mean")
	add(broadcastRule(2, boolType), "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor")
	add(broadcastRule(3, whereType), "Where")
	add(inferMatMul, "MatMul", "FusedMatMul")
	add(inferGemm, "Gemm")
	add(inferWindow, "Conv", "ConvTranspose", "MaxPool", "AveragePool")
	add(inferGlobalPool, "GlobalAveragePool", "GlobalMaxPool")
	add(inferFlatten, "Flatten")
	add(inferReshape, "Reshape")
	add(inferTranspose, "Transpose")
	add(inferConcat, "Concat")
	add(inferReduce, "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceSumSquare", "ReduceL1", "ReduceLogSum", "ReduceLogSumExp")
	add(inferShape, "Shape")
	add(inferSize, "Size")
	add(inferUnsqueeze, "Unsqueeze")
	add(inferSqueeze, "Squeeze")
	add(inferExpand, "Expand")
	add(inferConstantOfShape, "ConstantOfShape")
	add(inferConstant, "Constant")
	add(inferGather, "Gather")
	add(inferGatherElements, "GatherElements")
	add(inferResize, "Resize")
	add(inferPad, "Pad")
	add(inferEinsum, "Einsum")
	add(inferOneHot, "OneHot")
	add(inferTopK, "TopK")
	add(inferTile, "Tile")
	add(inferDepthToSpace, "DepthToSpace", "SpaceToDepth")
	add(inferGatherND, "GatherND")
	add(inferLoss, "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss")
	add(inferGridSample, "GridSample")
	add(inferSlice, "Slice")
	add(inferSplit, "Split")
	add(inferRange, "Range")
	add(inferArg, "ArgMax", "ArgMin")
	add(inferRecurrent, "LSTM", "GRU", "RNN")
	return rules
}()

// infer sets the facts of n's outputs from its inputs' facts.
func (g *Graph) infer(n *Node) {
	if rule, ok := inferRules[n.Op]; ok {
		rule(&inferCtx{g: g, n: n, x: g.Infos[n.Input(0)]})
	}
}

// inferCtx is one node being inferred.
type inferCtx struct {
	g *Graph
	n *Node
	x Info // the first input's facts, which most rules start from
}

// in returns input i's facts; an absent input is unknown.
func (c *inferCtx) in(i int) Info { return c.g.Infos[c.n.Input(i)] }

// set records output i's facts, if the node has that output. A shape no
// tensor can have (rank over maxRank, a dimension below -1), which a rule
// may compute from a malformed node's constants, is recorded as unknown.
func (c *inferCtx) set(i int, info Info) {
	o := c.n.Output(i)
	if o == "" {
		return
	}
	if info.Known && !plausible(info.Shape) {
		info = Info{DType: info.DType}
	}
	c.g.Infos[o] = info
}

// shaped sets output 0 to a known shape.
func (c *inferCtx) shaped(dt dtype.DType, s []int64) {
	c.set(0, Info{DType: dt, Known: true, Shape: s})
}

// unknown gives every output type dt and no shape: what a malformed node
// (an axis out of range...) gets. ONNX Runtime reports it properly when
// loading.
func (c *inferCtx) unknown(dt dtype.DType) {
	for i := range c.n.Outputs {
		c.set(i, Info{DType: dt})
	}
}

func plausible(s []int64) bool {
	if len(s) > maxRank {
		return false
	}
	for _, d := range s {
		if d < -1 {
			return false
		}
	}
	return true
}

// Broadcast returns the numpy-broadcast shape of the inputs; a dimension
// unknown in one and >1 in another takes the known one, and unknown stays
// unknown otherwise.
func Broadcast(infos ...Info) ([]int64, bool) {
	r := 0
	for _, i := range infos {
		if !i.Known {
			return nil, false
		}
		r = max(r, len(i.Shape))
	}
	out := make([]int64, r)
	for k := range out {
		out[k] = 1
	}
	for _, i := range infos {
		off := r - len(i.Shape)
		for k, d := range i.Shape {
			o := out[off+k]
			switch {
			case d == 1:
			case o == 1:
				out[off+k] = d
			case d == -1 || o == -1:
				out[off+k] = max(d, o) // a known dimension > 1 wins
			case d != o:
				return nil, false
			}
		}
	}
	return out, true
}

// ReduceAxes returns a Reduce* node's axes (normalised, sorted; empty means
// all unless noop_with_empty_axes), from its attribute or, from opset 18 (13
// for ReduceSum), its second input. Axes out of range are not ok.
func (g *Graph) ReduceAxes(n *Node) ([]int64, bool) {
	axes := n.Ints("axes")
	if n.Input(1) != "" {
		var ok bool
		if axes, ok = g.ConstInts(n.Input(1)); !ok {
			return nil, false
		}
	}
	x := g.Infos[n.Input(0)]
	if len(axes) == 0 {
		if n.Int("noop_with_empty_axes", 0) == 1 {
			return nil, false
		}
		return []int64{}, true
	}
	if !x.Known {
		return nil, false
	}
	a, ok := normAxes(axes, len(x.Shape))
	if !ok {
		return nil, false
	}
	slices.Sort(a)
	return a, true
}

// normAxis maps an axis in [-rank, rank) to [0, rank); others are not ok.
func normAxis(a int64, rank int) (int64, bool) {
	if a < 0 {
		a += int64(rank)
	}
	return a, a >= 0 && a < int64(rank)
}

// normAxes normalises axes as normAxis does, into a new slice.
func normAxes(axes []int64, rank int) ([]int64, bool) {
	out := make([]int64, len(axes))
	for i, a := range axes {
		var ok bool
		if out[i], ok = normAxis(a, rank); !ok {
			return nil, false
		}
	}
	return out, true
}

// prod multiplies dimensions: -1 if one is unknown, else 0 if one is 0,
// else the product, or -1 if it overflows int64.
func prod(s []int64) int64 {
	if slices.ContainsFunc(s, func(d int64) bool { return d < 0 }) {
		return -1
	}
	if slices.Contains(s, 0) {
		return 0
	}
	var ck checked
	p := int64(1)
	for _, d := range s {
		p = ck.mul(p, d)
	}
	if ck.over {
		return -1
	}
	return p
}

// checked is int64 arithmetic that notes overflow: rules compute sizes from
// a file's dimensions and attributes, which may be anything.
type checked struct{ over bool }

func (c *checked) add(a, b int64) int64 {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		c.over = true
	}
	return s
}

func (c *checked) sub(a, b int64) int64 {
	s := a - b
	if (b < 0 && s < a) || (b > 0 && s > a) {
		c.over = true
	}
	return s
}

func (c *checked) mul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	p := a * b
	if p/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		c.over = true
	}
	return p
}

// maxRank bounds the ranks inference makes up from a declared shape (a
// shape input's length): a model file could declare [1<<40] and have
// unknownDims allocate for it. No real tensor comes near it.
const maxRank = 64

// declaredRank is the length of a shape given as a run-time value of static
// facts [r], when r is a rank inference may make up (at most maxRank).
func declaredRank(si Info) (int64, bool) {
	if !si.Static() || len(si.Shape) != 1 || si.Shape[0] < 0 || si.Shape[0] > maxRank {
		return 0, false
	}
	return si.Shape[0], true
}

// unknownDims is a shape of known rank whose dimensions are all unknown: what
// a shape given at run time tells before it is seen.
func unknownDims(rank int64) []int64 {
	s := make([]int64, rank)
	for i := range s {
		s[i] = -1
	}
	return s
}
