package graph

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/internal/fuzzguard"
	"github.com/ortrain/ortrain/ort/onnxpb"
)

// inferOps lists the ops with a shape rule in a stable order, so that a
// fuzz input keeps naming the same op as rules are added at the end of the
// alphabet (and mostly otherwise).
func inferOps() []string {
	ops := make([]string, 0, len(inferRules))
	for op := range inferRules {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	return ops
}

// fuzzReader draws choices from fuzz bytes; past their end every choice is 0.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *fuzzReader) intn(n int) int { return int(r.byte()) % n }

// dim is a dimension: mostly small, sometimes unknown, zero or huge.
func (r *fuzzReader) dim() int64 {
	switch c := r.byte(); c % 16 {
	case 0:
		return -1
	case 1:
		return 0
	case 2:
		return 1 << 40
	case 3:
		return math.MaxInt64
	default:
		return int64(c%5 + 1)
	}
}

// int is an attribute or constant value: mostly a small axis-like number,
// sometimes far out of any range.
func (r *fuzzReader) int() int64 {
	switch c := r.byte(); c % 16 {
	case 0:
		return 99
	case 1:
		return -99
	case 2:
		return math.MaxInt64
	case 3:
		return math.MinInt64
	case 4:
		return 1 << 40
	default:
		return int64(c%9) - 4
	}
}

func (r *fuzzReader) ints() []int64 {
	v := make([]int64, r.intn(7))
	for i := range v {
		v[i] = r.int()
	}
	return v
}

var fuzzDTypes = []dtype.DType{dtype.Float32, dtype.Int64, dtype.Bool, dtype.Float16, dtype.Int32, 0}

// fuzzAttrNames are the attributes the shape rules read.
var fuzzAttrNames = []string{"axis", "axes", "perm", "keepdims", "starts", "ends", "pads", "kernel_shape",
	"strides", "dilations", "to", "group", "output_shape", "output_padding", "blocksize", "batch_dims",
	"allowzero", "transA", "transB", "ceil_mode", "auto_pad", "equation", "reduction", "start", "end",
	"noop_with_empty_axes", "value", "value_ints", "value_int", "value_float"}

var fuzzStrings = []string{"", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER", "none", "mean",
	"ij,jk->ik", "ij->ji", "ab,bc", "i,i->", "ij->z", "a...b->b", "abc,cd->abd"}

// attr is an attribute named for one of the rules, of any type: most of
// the time the type the rule reads, otherwise another.
func (r *fuzzReader) attr() *onnxpb.AttributeProto {
	name := fuzzAttrNames[r.intn(len(fuzzAttrNames))]
	switch r.intn(6) {
	case 0, 1:
		return AInt(name, r.int())
	case 2, 3:
		return AInts(name, r.ints())
	case 4:
		return AString(name, fuzzStrings[r.intn(len(fuzzStrings))])
	}
	if r.intn(4) == 0 {
		// A Constant's value whose dimensions claim what its data lacks
		// (Load checks initializers, not attributes).
		return ATensor(name, &onnxpb.TensorProto{DataType: proto.Int32(int32(dtype.Int64)), Dims: []int64{r.dim(), r.int()}})
	}
	return ATensor(name, r.tensor())
}

// tensor is a small constant: int64 most of the time (what the rules read
// as sizes and axes), else float32 (Resize's scales).
func (r *fuzzReader) tensor() *onnxpb.TensorProto {
	v := r.ints()
	if r.intn(4) == 0 {
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = float32(x) / 2
		}
		return Float32s("", []int64{int64(len(f))}, f)
	}
	return Int64s("", []int64{int64(len(v))}, v)
}

// fuzzInferGraph builds a graph from fuzz bytes: a few graph inputs of
// random types and shapes (ranks 0-5) and int64 or float constants, then a
// few nodes of ops with shape rules, each reading 0-4 of the values so far
// (or absent inputs) with random attributes. Every node is inferred as
// AddNode adds it.
func fuzzInferGraph(b []byte) *Graph {
	r := &fuzzReader{b}
	ops := inferOps()
	g := New("fuzz", EmitOpset)
	var values []string
	for i := range 1 + r.intn(4) {
		name := fmt.Sprintf("v%d", i)
		values = append(values, name)
		if r.intn(3) == 0 {
			t := r.tensor()
			t.Name = proto.String(name)
			g.AddInitializer(t)
			continue
		}
		info := Info{DType: fuzzDTypes[r.intn(len(fuzzDTypes))], Known: r.intn(8) != 0}
		if info.Known {
			info.Shape = make([]int64, r.intn(6))
			for k := range info.Shape {
				info.Shape[k] = r.dim()
			}
		}
		g.AddInput(name, info)
	}
	for i := range 1 + r.intn(3) {
		n := &Node{Op: ops[(int(r.byte())<<8|int(r.byte()))%len(ops)]}
		for range r.intn(5) {
			if k := r.intn(len(values) + 1); k < len(values) {
				n.Inputs = append(n.Inputs, values[k])
			} else {
				n.Inputs = append(n.Inputs, "")
			}
		}
		for j := range r.intn(4) {
			name := fmt.Sprintf("n%d_%d", i, j)
			if r.intn(8) == 0 {
				name = ""
			}
			n.Outputs = append(n.Outputs, name)
			if name != "" {
				values = append(values, name)
			}
		}
		for range r.intn(6) {
			n.Attrs = append(n.Attrs, r.attr())
		}
		g.AddNode(n)
	}
	return g
}

// checkFacts fails on facts no tensor can have.
func checkFacts(t *testing.T, g *Graph) {
	t.Helper()
	for name, info := range g.Infos {
		if !info.Known {
			continue
		}
		if len(info.Shape) > maxRank || slices.ContainsFunc(info.Shape, func(d int64) bool { return d < -1 }) {
			t.Errorf("%s: impossible facts %v (rank %d)", name, info, len(info.Shape))
		}
	}
}

// FuzzInfer runs shape inference on small graphs of every op with a rule,
// built from the fuzz bytes with malformed nodes in mind (missing inputs,
// axes out of range, wrong attribute types, huge or unknown sizes). It must
// not panic or hang and must not claim a rank over maxRank or a dimension
// below -1; inferring the whole graph again must not either.
func FuzzInfer(f *testing.F) {
	ops := inferOps()
	for i := range ops {
		// Each op over a float input [2,3,4] and an int64 constant [0,-1],
		// with two outputs, without attributes and with axis 2.
		seed := []byte{1, 1, 0, 1, 3, 6, 7, 8, 0, 2, 13, 12, 2, 0, byte(i >> 8), byte(i), 2, 0, 1, 2, 1, 1}
		f.Add(append(slices.Clone(seed), 0))
		f.Add(append(slices.Clone(seed), 1, 0, 0, 6))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzzguard.Watchdog(10 * time.Second)()
		g := fuzzInferGraph(b)
		checkFacts(t, g)
		g.Reinfer()
		checkFacts(t, g)
	})
}

// TestInferMalformed runs every shape rule on nodes ONNX Runtime would
// refuse: no inputs, scalar or unknown inputs, axes far out of range,
// permutations too short, empty attributes. None may panic (a rule added
// without its checks fails here), and none may claim impossible facts.
func TestInferMalformed(t *testing.T) {
	inputs := map[string]Info{
		"scalar":  {DType: dtype.Float32, Known: true, Shape: []int64{}},
		"r1":      {DType: dtype.Float32, Known: true, Shape: []int64{5}},
		"r4":      {DType: dtype.Float32, Known: true, Shape: []int64{2, 3, 4, 5}},
		"unknown": {DType: dtype.Float32},
		"huge":    {DType: dtype.Float32, Known: true, Shape: []int64{math.MaxInt64, math.MaxInt64, -1}},
	}
	consts := map[string][]int64{"c_empty": {}, "c_big": {99, -99, math.MaxInt64}, "c_zero": {0, 0}, "c_neg": {-5, -1, -1}}
	attrSets := [][]*onnxpb.AttributeProto{
		nil,
		{AInt("axis", 99), AInts("axes", []int64{99}), AInts("perm", []int64{99, 0})},
		{AInt("axis", -99), AInts("axes", []int64{-99, -99}), AInts("perm", []int64{0})},
		{AInts("perm", []int64{}), AInts("kernel_shape", []int64{}), AInts("strides", []int64{0}), AInts("pads", []int64{1})},
		{AInts("axis", []int64{1}), AInt("perm", 1), AString("axes", "x"), AInt("blocksize", math.MaxInt64)},
		{AInts("kernel_shape", []int64{3, 3}), AInts("strides", []int64{math.MaxInt64, 1}), AInts("pads", []int64{math.MaxInt64, math.MaxInt64, 1, 1}),
			AInts("output_shape", []int64{1}), AInts("output_padding", []int64{})},
		{AString("equation", "ij->ijz"), AInt("axis", math.MinInt64), AInt("to", math.MaxInt64)},
	}
	var inputSets [][]string
	inputSets = append(inputSets, nil, []string{""}, []string{"", "", "", "", ""})
	for name := range inputs {
		inputSets = append(inputSets, []string{name}, []string{name, name}, []string{name, "r1", "r4", "scalar"})
		for c := range consts {
			inputSets = append(inputSets, []string{name, c, c, c, c})
		}
	}
	for _, op := range inferOps() {
		for _, ins := range inputSets {
			for ai, attrs := range attrSets {
				for _, outs := range [][]string{nil, {"y"}, {"y", "", "z"}} {
					g := New("t", EmitOpset)
					for name, info := range inputs {
						g.AddInput(name, info)
					}
					for name, v := range consts {
						g.AddInitializer(Int64s(name, []int64{int64(len(v))}, v))
					}
					n := &Node{Op: op, Inputs: ins, Outputs: outs, Attrs: attrs}
					func() {
						defer func() {
							if p := recover(); p != nil {
								t.Fatalf("%s with inputs %q, attributes #%d, outputs %q: panic: %v", op, ins, ai, outs, p)
							}
						}()
						g.AddNode(n)
						g.Reinfer()
					}()
					checkFacts(t, g)
				}
			}
		}
	}
}
