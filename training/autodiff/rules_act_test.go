package autodiff_test

import (
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// Cases for rules_act.go. The activations and trigonometric ops have only
// float32 kernels on ONNX Runtime's CPU, so they run under the float32
// tolerances of fd_test.go; inputs stay ≥ 0.2 away from each kink (the
// wide and away generators) so h = 1e-2 never straddles one (Shrink jumps
// at ±lambd, so its lambd sits in wide's gap). The reductions run in
// float64; Mean has only a float32 kernel.

// reduceAttr is a Reduce op with opset 17's axes attribute.
func reduceAttr(op string, keep int64, axes ...int64) func(b *graph.Builder, x []string) string {
	return func(b *graph.Builder, x []string) string {
		attrs := []*graph.Attr{ai("keepdims", keep)}
		if len(axes) > 0 {
			attrs = append(attrs, ais("axes", axes))
		}
		return b.Op(op, x, attrs...)
	}
}

var actCases = []fdCase{
	{name: "LeakyRelu", dtype: f32, ins: ins(away, s(2, 3, 4)), build: op("LeakyRelu", af("alpha", 0.2))},
	{name: "LeakyRelu/default-3d", dtype: f32, ins: ins(away, s(1, 2, 2, 2, 3)), build: op("LeakyRelu")},
	{name: "Elu", dtype: f32, ins: ins(away, s(2, 5)), build: op("Elu", af("alpha", 0.7))},
	{name: "Selu", dtype: f32, ins: ins(away, s(2, 5)), build: op("Selu")},
	{name: "Celu", dtype: f32, ins: ins(away, s(2, 5)), build: op("Celu", af("alpha", 1.5))},
	{name: "HardSigmoid", dtype: f32, ins: ins(wide, s(3, 6)), build: op("HardSigmoid")},
	{name: "HardSwish", dtype: f32, ins: ins(wide, s(3, 6)), build: op("HardSwish")},
	{name: "Softsign", dtype: f32, ins: ins(normal, s(2, 5)), build: op("Softsign")},
	{name: "ThresholdedRelu", dtype: f32, ins: ins(wide, s(3, 6)), build: op("ThresholdedRelu", af("alpha", 0.5))},
	{name: "Shrink", dtype: f32, ins: ins(wide, s(3, 6)), build: op("Shrink", af("lambd", 3), af("bias", 0.3))},
	{name: "Mish", dtype: f32, opset: 18, ins: ins(normal, s(2, 5)), build: op("Mish")},
	{name: "PRelu/per-channel", dtype: f32, ins: []in{{shape: s(2, 3, 4), g: away}, {shape: s(3, 1), g: positive}}, build: op("PRelu")},
	{name: "PRelu/scalar-2d", dtype: f32, ins: []in{{shape: s(2, 3, 2, 2), g: away}, {shape: s(1), g: positive}}, build: op("PRelu")},

	{name: "Tan", dtype: f32, ins: ins(unit, s(2, 4)), build: op("Tan")},
	{name: "Asin", dtype: f32, ins: ins(unit, s(2, 4)), build: op("Asin")},
	{name: "Acos", dtype: f32, ins: ins(unit, s(2, 4)), build: op("Acos")},
	{name: "Atan", dtype: f32, ins: ins(normal, s(2, 4)), build: op("Atan")},
	{name: "Sinh", dtype: f32, ins: ins(unit, s(2, 4)), build: op("Sinh")},
	{name: "Cosh", dtype: f32, ins: ins(unit, s(2, 4)), build: op("Cosh")},
	{name: "Asinh", dtype: f32, ins: ins(normal, s(2, 4)), build: op("Asinh")},
	{name: "Acosh", dtype: f32, ins: ins(aboveOne, s(2, 4)), build: op("Acosh")},
	{name: "Atanh", dtype: f32, ins: ins(unit, s(2, 4)), build: op("Atanh")},

	{name: "Mean/broadcast", dtype: f32, ins: ins(normal, s(2, 3), s(3), s(2, 1)), build: op("Mean")},
	{name: "ReduceSumSquare/axis", dtype: f64, ins: ins(normal, s(2, 3, 4)), build: reduceAttr("ReduceSumSquare", 0, 1)},
	{name: "ReduceL1/all", dtype: f64, ins: ins(away, s(3, 4)), build: reduceAttr("ReduceL1", 1)},
	{name: "ReduceL2/axes", dtype: f64, ins: ins(normal, s(2, 3, 4)), build: reduceAttr("ReduceL2", 0, 0, 2)},
	{name: "ReduceL2/opset18-axes-input", dtype: f64, opset: 18, ins: ins(normal, s(2, 3, 4)), build: func(b *graph.Builder, x []string) string {
		return b.Op("ReduceL2", []string{x[0], b.Ints(-1)}, ai("keepdims", 1))
	}},
	{name: "ReduceLogSum/axis", dtype: f64, ins: ins(positive, s(2, 3, 4)), build: reduceAttr("ReduceLogSum", 1, 2)},
	{name: "ReduceLogSumExp/axis", dtype: f64, ins: ins(normal, s(2, 3, 4)), build: reduceAttr("ReduceLogSumExp", 0, 1)},
	{name: "ReduceLogSumExp/last-drop", dtype: f64, ins: ins(normal, s(2, 3, 5)), build: reduceAttr("ReduceLogSumExp", 0, -1)},
	{name: "ReduceLogSumExp/last-keep", dtype: f32, ins: ins(normal, s(3, 7)), build: reduceAttr("ReduceLogSumExp", 1, 1)},
	{name: "ReduceLogSumExp/all", dtype: f64, ins: ins(normal, s(2, 3)), build: reduceAttr("ReduceLogSumExp", 0)},
	// A language model's head and loss: the backward's row scaling moves
	// through both Gemms (rowScaleThroughGemm).
	{name: "ReduceLogSumExp/over-gemm-rows", dtype: f64, ins: ins(normal, s(3, 4), s(6, 4)), build: func(b *graph.Builder, x []string) string {
		return b.ReduceLogSumExp(b.Op("Gemm", x, ai("transB", 1)), false, 1)
	}},
	{name: "ReduceProd/axis", dtype: f64, ins: ins(positive, s(2, 3, 2)), build: reduceAttr("ReduceProd", 0, 1)},
	{name: "ReduceProd/all-keep", dtype: f64, ins: ins(away, s(2, 3)), build: reduceAttr("ReduceProd", 1)},
	{name: "ReduceProd/one-zero", dtype: f64, ins: ins(zeroFirst, s(2, 3)), build: reduceAttr("ReduceProd", 1, 1)},
	{name: "ReduceProd/with-zeros", dtype: f64, ins: ins(away, s(2, 3)), build: func(b *graph.Builder, x []string) string {
		// Row 0 meets one zero, row 1 two: products of the rest, and 0.
		z := b.Const(graph.Float64s("", s(2, 2), []float64{0, 1, 0, 0}))
		return b.Op("ReduceProd", []string{b.Op("Concat", []string{x[0], z}, ai("axis", 1))}, ai("keepdims", 0), ais("axes", s(1)))
	}},
	{name: "GlobalMaxPool/2d", dtype: f32, ins: ins(distinct, s(2, 3, 3, 4)), build: op("GlobalMaxPool")},
	{name: "GlobalMaxPool/3d", dtype: f32, ins: ins(distinct, s(1, 2, 2, 3, 2)), build: op("GlobalMaxPool")},
}

// lossOp builds a loss op over x[0] (scores or log-probabilities
// [2, 3, 2]) with fixed targets, some at the ignored index 1 when
// ignore is set, and class weights when weighted.
func lossOp(name, reduction string, weighted, ignore bool, logProb bool) func(b *graph.Builder, x []string) string {
	return func(b *graph.Builder, x []string) string {
		t := idx(b, s(2, 2), 0, 2, 1, 2)
		in := []string{x[0], t}
		if weighted {
			in = append(in, b.Const(graph.Float64s("", s(3), []float64{0.5, 2, 1.25})))
		}
		attrs := []*graph.Attr{graph.AString("reduction", reduction)}
		if ignore {
			attrs = append(attrs, ai("ignore_index", 1))
		}
		if logProb {
			outs := b.OpN(name, in, 2, attrs...)
			return b.Add(b.ReduceSum(outs[0], false), b.ReduceSum(b.Mul(outs[1], outs[1]), false))
		}
		return b.Op(name, in, attrs...)
	}
}

func init() {
	for _, op := range []string{"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"} {
		for _, red := range []string{"mean", "sum", "none"} {
			actCases = append(actCases,
				fdCase{name: op + "/" + red, dtype: f64, ins: ins(normal, s(2, 3, 2)), build: lossOp(op, red, false, false, false)},
				fdCase{name: op + "/" + red + "-weighted-ignore", dtype: f64, ins: ins(normal, s(2, 3, 2)), build: lossOp(op, red, true, true, false)})
		}
	}
	actCases = append(actCases, fdCase{name: "SoftmaxCrossEntropyLoss/with-log-prob", dtype: f64, ins: ins(normal, s(2, 3, 2)),
		build: lossOp("SoftmaxCrossEntropyLoss", "mean", true, false, true)})
}

func init() { ruleCases = append(ruleCases, actCases...) }

// TestMaxPoolGradientAddsInFloat32: a float16 MaxPool's overlapping
// windows add their gradients in float32 (ScatterElements reads and
// writes float32), and the input's gradient leaves in float16.
func TestMaxPoolGradientAddsInFloat32(t *testing.T) {
	g := graph.New("pool", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: dtype.Float16, Known: true, Shape: []int64{2, 3, 8, 8}})
	b := graph.NewBuilder(g, "fwd/")
	y := b.Op("MaxPool", []string{"x"}, ais("kernel_shape", s(3, 3)), ais("strides", s(2, 2)), ais("pads", s(1, 1, 1, 1)))
	grads, err := autodiff.Gradients(g, b.ReduceSum(b.Cast(y, dtype.Float32), false), []string{"x"}, "grad/")
	if err != nil {
		t.Fatal(err)
	}
	scatters := 0
	for _, n := range g.Nodes {
		if n.Op == "ScatterElements" {
			scatters++
			if dt := g.Info(n.Outputs[0]).DType; dt != dtype.Float32 || g.Info(n.Inputs[2]).DType != dtype.Float32 {
				t.Errorf("ScatterElements writes %s from %s; want float32", dt, g.Info(n.Inputs[2]).DType)
			}
		}
	}
	if scatters != 1 || g.Info(grads["x"]).DType != dtype.Float16 {
		t.Errorf("%d ScatterElements, x's gradient in %s; want 1 and float16", scatters, g.Info(grads["x"]).DType)
	}
}
