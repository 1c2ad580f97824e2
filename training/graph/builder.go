package graph

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort/onnxpb"
)

// Builder emits nodes into a graph with fresh names under a prefix. Methods
// return the name of the value they produce. The first failure is kept in
// Err and later calls become no-ops returning "", so a gradient rule reads
// as a formula and its caller checks Err once.
type Builder struct {
	G      *Graph
	Prefix string
	Err    error
}

// NewBuilder returns a builder emitting into g with names starting prefix.
func NewBuilder(g *Graph, prefix string) *Builder {
	return &Builder{G: g, Prefix: prefix}
}

// Fail records an error unless one is already recorded, and returns "".
func (b *Builder) Fail(format string, args ...any) string {
	if b.Err == nil {
		b.Err = fmt.Errorf(format, args...)
	}
	return ""
}

// Info returns the facts known about a value.
func (b *Builder) Info(v string) Info { return b.G.Infos[v] }

// OpN emits a node with n outputs and returns their names.
func (b *Builder) OpN(op string, inputs []string, n int, attrs ...*onnxpb.AttributeProto) []string {
	if b.Err != nil {
		return make([]string, n)
	}
	outs := make([]string, n)
	for i := range outs {
		outs[i] = b.G.Fresh(b.Prefix + op + "_out")
	}
	domain := ""
	if op == "FusedMatMul" {
		domain = MSDomain
		b.G.Domains[domain] = 1
	}
	b.G.AddNode(&Node{Op: op, Domain: domain, Name: b.G.Fresh(b.Prefix + op), Inputs: inputs, Outputs: outs, Attrs: attrs})
	return outs
}

// Op emits a node with one output.
func (b *Builder) Op(op string, inputs []string, attrs ...*onnxpb.AttributeProto) string {
	return b.OpN(op, inputs, 1, attrs...)[0]
}

// AInt is an integer attribute.
func AInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

// AInts is an integer-list attribute.
func AInts(name string, v []int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: slices.Clone(v)}
}

// AFloat is a float attribute.
func AFloat(name string, v float64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(float32(v))}
}

// AString is a string attribute.
func AString(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(v)}
}

// ATensor is a tensor attribute.
func ATensor(name string, t *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t}
}

// Const adds t as an initializer under a fresh name.
func (b *Builder) Const(t *onnxpb.TensorProto) string {
	if b.Err != nil {
		return ""
	}
	t.Name = proto.String(b.G.Fresh(b.Prefix + "const"))
	b.G.AddInitializer(t)
	return t.GetName()
}

// Ints is a 1-D int64 constant.
func (b *Builder) Ints(v ...int64) string {
	return b.Const(Int64s("", []int64{int64(len(v))}, v))
}

// Scalar is a rank-0 constant of a floating type.
func (b *Builder) Scalar(dt dtype.DType, v float64) string {
	t, err := Floats("", dt, nil, []float64{v})
	if err != nil {
		return b.Fail("%w", err)
	}
	return b.Const(t)
}

// ScalarLike is a rank-0 constant of x's type.
func (b *Builder) ScalarLike(x string, v float64) string {
	return b.Scalar(b.Info(x).DType, v)
}

// Add emits the ONNX Add op.
func (b *Builder) Add(x, y string) string { return b.Op("Add", []string{x, y}) }

// Sub emits the ONNX Sub op.
func (b *Builder) Sub(x, y string) string { return b.Op("Sub", []string{x, y}) }

// Mul emits the ONNX Mul op.
func (b *Builder) Mul(x, y string) string { return b.Op("Mul", []string{x, y}) }

// Div emits the ONNX Div op.
func (b *Builder) Div(x, y string) string { return b.Op("Div", []string{x, y}) }

// Pow emits the ONNX Pow op.
func (b *Builder) Pow(x, y string) string { return b.Op("Pow", []string{x, y}) }

// Neg emits the ONNX Neg op.
func (b *Builder) Neg(x string) string { return b.Op("Neg", []string{x}) }

// Exp emits the ONNX Exp op.
func (b *Builder) Exp(x string) string { return b.Op("Exp", []string{x}) }

// Log emits the ONNX Log op.
func (b *Builder) Log(x string) string { return b.Op("Log", []string{x}) }

// Sqrt emits the ONNX Sqrt op.
func (b *Builder) Sqrt(x string) string { return b.Op("Sqrt", []string{x}) }

// Abs emits the ONNX Abs op.
func (b *Builder) Abs(x string) string { return b.Op("Abs", []string{x}) }

// Sign emits the ONNX Sign op.
func (b *Builder) Sign(x string) string { return b.Op("Sign", []string{x}) }

// Relu emits the ONNX Relu op.
func (b *Builder) Relu(x string) string { return b.Op("Relu", []string{x}) }

// Sigmoid emits the ONNX Sigmoid op.
func (b *Builder) Sigmoid(x string) string { return b.Op("Sigmoid", []string{x}) }

// Tanh emits the ONNX Tanh op.
func (b *Builder) Tanh(x string) string { return b.Op("Tanh", []string{x}) }

// Shape emits the ONNX Shape op.
func (b *Builder) Shape(x string) string { return b.Op("Shape", []string{x}) }

// Greater emits the ONNX Greater op.
func (b *Builder) Greater(x, y string) string {
	return b.Op("Greater", []string{x, y})
}

// Equal emits the ONNX Equal op.
func (b *Builder) Equal(x, y string) string { return b.Op("Equal", []string{x, y}) }

// Where emits the ONNX Where op.
func (b *Builder) Where(c, x, y string) string {
	return b.Op("Where", []string{c, x, y})
}

// Min emits the ONNX Min op.
func (b *Builder) Min(x, y string) string { return b.Op("Min", []string{x, y}) }

// Max emits the ONNX Max op.
func (b *Builder) Max(x, y string) string { return b.Op("Max", []string{x, y}) }

// Cast converts x to another element type.
func (b *Builder) Cast(x string, to dtype.DType) string {
	return b.Op("Cast", []string{x}, AInt("to", int64(to)))
}

// Sum adds any number of values; one value is returned as is.
func (b *Builder) Sum(xs ...string) string {
	if len(xs) == 1 {
		return xs[0]
	}
	return b.Op("Sum", xs)
}

// MatMul is numpy matmul.
func (b *Builder) MatMul(x, y string) string { return b.Op("MatMul", []string{x, y}) }

// Transpose permutes axes.
func (b *Builder) Transpose(x string, perm ...int64) string {
	return b.Op("Transpose", []string{x}, AInts("perm", perm))
}

// SwapLast transposes the last two axes of x (rank >= 2, known).
func (b *Builder) SwapLast(x string) string {
	r := b.Info(x).Rank()
	if r < 2 {
		return b.Fail("graph: SwapLast needs %s to have a known rank >= 2, it is %v", x, b.Info(x))
	}
	perm := make([]int64, r)
	for i := range perm {
		perm[i] = int64(i)
	}
	perm[r-1], perm[r-2] = perm[r-2], perm[r-1]
	return b.Transpose(x, perm...)
}

// Reshape gives x the shape held by the int64 value shape.
func (b *Builder) Reshape(x, shape string) string { return b.Op("Reshape", []string{x, shape}) }

// ReshapeLike gives x, which has as many elements as like, the runtime
// shape of like. With one dimension unknown (the batch) the shape is a
// constant with -1 there; with more it is read when the graph runs, which
// keeps like alive until then.
func (b *Builder) ReshapeLike(x, like string) string {
	li := b.Info(like)
	if li.Static() {
		return b.Reshape(x, b.Ints(li.Shape...))
	}
	if li.Known {
		unknown := 0
		for _, d := range li.Shape {
			if d < 0 {
				unknown++
			} else if d == 0 {
				unknown = 2 // a 0 in Reshape's shape means "copy": read it instead
			}
		}
		if unknown == 1 {
			shape := slices.Clone(li.Shape)
			for i, d := range shape {
				if d < 0 {
					shape[i] = -1
				}
			}
			return b.Reshape(x, b.Ints(shape...))
		}
	}
	return b.Reshape(x, b.Shape(like))
}

// ExpandLike broadcasts x to the runtime shape of like.
func (b *Builder) ExpandLike(x, like string) string {
	if li := b.Info(like); li.Static() {
		return b.Op("Expand", []string{x, b.Ints(li.Shape...)})
	}
	return b.Op("Expand", []string{x, b.Shape(like)})
}

// Unsqueeze inserts axes of size 1.
func (b *Builder) Unsqueeze(x string, axes ...int64) string {
	return b.Op("Unsqueeze", []string{x, b.Ints(axes...)})
}

// Squeeze removes axes of size 1.
func (b *Builder) Squeeze(x string, axes ...int64) string {
	return b.Op("Squeeze", []string{x, b.Ints(axes...)})
}

// reduce emits a Reduce* op with the axes as an attribute or, where the
// opset wants it, an input.
func (b *Builder) reduce(op string, x string, axes []int64, keep bool) string {
	k := int64(0)
	if keep {
		k = 1
	}
	if op == "ReduceSum" || b.G.Opset >= 18 {
		in := []string{x}
		if len(axes) > 0 {
			in = append(in, b.Ints(axes...))
		}
		return b.Op(op, in, AInt("keepdims", k))
	}
	attrs := []*onnxpb.AttributeProto{AInt("keepdims", k)}
	if len(axes) > 0 {
		attrs = append(attrs, AInts("axes", axes))
	}
	return b.Op(op, []string{x}, attrs...)
}

// ReduceSum sums over axes (all when none are given).
func (b *Builder) ReduceSum(x string, keep bool, axes ...int64) string {
	return b.reduce("ReduceSum", x, axes, keep)
}

// ReduceMean averages over axes (all when none are given).
func (b *Builder) ReduceMean(x string, keep bool, axes ...int64) string {
	return b.reduce("ReduceMean", x, axes, keep)
}

// ReduceMax takes the maximum over axes.
func (b *Builder) ReduceMax(x string, keep bool, axes ...int64) string {
	return b.reduce("ReduceMax", x, axes, keep)
}

// ReduceLogSumExp is log Σ exp over axes, computed by ONNX Runtime
// without a full-size intermediate.
func (b *Builder) ReduceLogSumExp(x string, keep bool, axes ...int64) string {
	return b.reduce("ReduceLogSumExp", x, axes, keep)
}

// ReduceSumTo undoes broadcasting: it sums g, a gradient with the shape of a
// broadcast result, down to the shape of target. The axes are fixed from the
// ranks and the dimensions known to be 1 in target, so the emitted op works
// for any batch size. A dimension unknown in target is assumed not to be a
// broadcast 1 (symbolic dimensions meet equal symbolic dimensions).
func (b *Builder) ReduceSumTo(g, target string) string {
	gi, ti := b.Info(g), b.Info(target)
	if b.Err != nil {
		return ""
	}
	if !gi.Known || !ti.Known {
		return b.Fail("graph: cannot undo broadcasting from %s %v to %s %v: rank unknown", g, gi, target, ti)
	}
	lead := len(gi.Shape) - len(ti.Shape)
	if lead < 0 {
		return b.Fail("graph: gradient %s %v has lower rank than %s %v", g, gi, target, ti)
	}
	var ones []int64
	for i, d := range ti.Shape {
		if d == 1 && gi.Shape[lead+i] != 1 {
			ones = append(ones, int64(lead+i))
		}
	}
	out := g
	if len(ones) > 0 {
		out = b.ReduceSum(out, true, ones...)
	}
	if lead > 0 {
		axes := make([]int64, lead)
		for i := range axes {
			axes[i] = int64(i)
		}
		out = b.ReduceSum(out, false, axes...)
	}
	return out
}

// Numel returns, as a rank-0 value of dt, the product of x's dimensions
// along axes (all when none are given): a constant when they are static,
// read from Shape at run time otherwise.
func (b *Builder) Numel(x string, dt dtype.DType, axes ...int64) string {
	xi := b.Info(x)
	if !xi.Known {
		return b.Fail("graph: rank of %s unknown", x)
	}
	if len(axes) == 0 {
		for i := range xi.Shape {
			axes = append(axes, int64(i))
		}
	}
	n := int64(1)
	static := true
	for _, a := range axes {
		if xi.Shape[a] < 0 {
			static = false
		}
		n *= xi.Shape[a]
	}
	if static {
		return b.Scalar(dt, float64(n))
	}
	dims := b.Op("Gather", []string{b.Shape(x), b.Ints(axes...)}, AInt("axis", 0))
	return b.Cast(b.Op("ReduceProd", []string{dims}, AInt("keepdims", 0)), dt)
}

// ZerosLike returns zeros with x's runtime shape and type.
func (b *Builder) ZerosLike(x string) string { return b.ZerosLikeIn(x, b.Info(x).DType) }

// ZerosLikeIn is zeros of x's shape in type dt (x's data is not read).
func (b *Builder) ZerosLikeIn(x string, dt dtype.DType) string {
	xi := b.Info(x)
	zero, err := Floats("", dt, []int64{1}, []float64{0})
	if err != nil {
		return b.Fail("%w", err)
	}
	var shape string
	if xi.Static() {
		shape = b.Ints(xi.Shape...)
	} else {
		shape = b.Shape(x)
	}
	return b.Op("ConstantOfShape", []string{shape}, ATensor("value", zero))
}

// Attr is an ONNX node attribute.
type Attr = onnxpb.AttributeProto

// OpInto emits a one-output node whose output gets the given name, for
// passes that replace a node and must keep its output's name.
func (b *Builder) OpInto(out, op string, inputs []string, attrs ...*onnxpb.AttributeProto) string {
	if b.Err != nil {
		return ""
	}
	b.G.AddNode(&Node{Op: op, Name: b.G.Fresh(b.Prefix + op), Inputs: inputs, Outputs: []string{out}, Attrs: attrs})
	return out
}

// Identity copies x under a new name.
func (b *Builder) Identity(x string) string { return b.Op("Identity", []string{x}) }
