package autodiff_test

import (
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/graph"
)

const (
	f64 = ort.Float64
	f32 = ort.Float32
)

// ruleCases covers every gradient rule with several shapes, broadcasting
// and 1-D/2-D/3-D windows; each is checked against central differences.
var ruleCases = []fdCase{
	{name: "Identity", dtype: f64, ins: ins(normal, s(2, 3)), build: op("Identity")},
	{name: "Neg", dtype: f64, ins: ins(normal, s(2, 3, 4)), build: op("Neg")},
	{name: "Abs", dtype: f64, ins: ins(away, s(2, 3, 4)), build: op("Abs")},
	{name: "Relu", dtype: f64, ins: ins(away, s(2, 3, 4)), build: op("Relu")},
	{name: "Exp", dtype: f64, ins: ins(normal, s(5)), build: op("Exp")},
	{name: "Log", dtype: f64, ins: ins(positive, s(2, 5)), build: op("Log")},
	{name: "Sqrt", dtype: f64, ins: ins(positive, s(2, 5)), build: op("Sqrt")},
	{name: "Sigmoid", dtype: f64, ins: ins(normal, s(3, 4)), build: op("Sigmoid")},
	{name: "Tanh", dtype: f64, ins: ins(normal, s(3, 4)), build: op("Tanh")},
	{name: "Softmax/last", dtype: f64, ins: ins(normal, s(2, 3, 4)), build: op("Softmax")},
	{name: "Softmax/axis1", dtype: f64, ins: ins(normal, s(2, 3, 4)), build: op("Softmax", ai("axis", 1))},
	{name: "LogSoftmax/last", dtype: f64, ins: ins(normal, s(3, 5)), build: op("LogSoftmax")},
	{name: "LogSoftmax/axis0", dtype: f64, ins: ins(normal, s(3, 2, 2)), build: op("LogSoftmax", ai("axis", 0))},
	{name: "Cast/f32-f64-f32", dtype: f32, ins: ins(normal, s(4)), build: func(b *graph.Builder, x []string) string {
		return b.Cast(b.Mul(b.Cast(x[0], f64), b.Scalar(f64, 3)), f32)
	}},

	{name: "Add/same", dtype: f64, ins: ins(normal, s(2, 3), s(2, 3)), build: op("Add")},
	{name: "Add/row", dtype: f64, ins: ins(normal, s(2, 3, 4), s(4)), build: op("Add")},
	{name: "Sub/both-broadcast", dtype: f64, ins: ins(normal, s(2, 1, 4), s(3, 1)), build: op("Sub")},
	{name: "Sub/scalar", dtype: f64, ins: ins(normal, s(), s(2, 3)), build: op("Sub")},
	{name: "Mul/same", dtype: f64, ins: ins(normal, s(3, 4), s(3, 4)), build: op("Mul")},
	{name: "Mul/channel", dtype: f64, ins: ins(normal, s(2, 3, 2, 2), s(1, 3, 1, 1)), build: op("Mul")},
	{name: "Div/col", dtype: f64, ins: []in{{shape: s(3, 4), g: normal}, {shape: s(3, 1), g: positive}}, build: op("Div")},
	{name: "Div/lead", dtype: f64, ins: []in{{shape: s(4), g: normal}, {shape: s(2, 4), g: positive}}, build: op("Div")},
	{name: "Pow/broadcast", dtype: f64, ins: []in{{shape: s(2, 3), g: positive}, {shape: s(3), g: normal}}, build: op("Pow")},
	{name: "Pow/const-square", dtype: f64, ins: ins(normal, s(2, 3)), build: func(b *graph.Builder, x []string) string {
		return b.Pow(x[0], b.Scalar(f64, 2))
	}},
	// fmod: quotients up to 25 cross several integers; the draws keep A/B
	// away from them (where Y jumps), as for the other kinks.
	{name: "Mod/fmod", dtype: f64, ins: []in{{shape: s(2, 3), g: wide}, {shape: s(2, 3), g: positive}}, build: op("Mod", ai("fmod", 1))},
	{name: "Mod/fmod-broadcast-negative", dtype: f64, ins: []in{{shape: s(3, 4), g: wide}, {shape: s(4), g: away}}, build: op("Mod", ai("fmod", 1))},
	{name: "Sum/three", dtype: f64, ins: ins(normal, s(2, 3), s(3), s(2, 1)), build: op("Sum")},

	{name: "MatMul/2d", dtype: f64, ins: ins(normal, s(3, 4), s(4, 5)), build: op("MatMul")},
	{name: "MatMul/batch-by-2d", dtype: f64, ins: ins(normal, s(2, 3, 4), s(4, 5)), build: op("MatMul")},
	{name: "MatMul/broadcast-batch", dtype: f64, ins: ins(normal, s(2, 1, 3, 4), s(3, 4, 2)), build: op("MatMul")},
	{name: "MatMul/vec-mat", dtype: f64, ins: ins(normal, s(4), s(2, 4, 5)), build: op("MatMul")},
	{name: "MatMul/mat-vec", dtype: f64, ins: ins(normal, s(2, 3, 4), s(4)), build: op("MatMul")},
	{name: "MatMul/dot", dtype: f64, ins: ins(normal, s(4), s(4)), build: op("MatMul")},
	{name: "Gemm/plain", dtype: f64, ins: ins(normal, s(3, 4), s(4, 5), s(5)), build: op("Gemm")},
	{name: "Gemm/transB", dtype: f64, ins: ins(normal, s(3, 4), s(5, 4), s(1, 5)), build: op("Gemm", ai("transB", 1), graph.AFloat("alpha", 0.7), graph.AFloat("beta", 1.3))},
	{name: "Gemm/transA", dtype: f64, ins: ins(normal, s(4, 3), s(4, 5), s(3, 5)), build: op("Gemm", ai("transA", 1), graph.AFloat("alpha", 1.5))},
	{name: "Gemm/both-no-C", dtype: f64, ins: ins(normal, s(4, 3), s(5, 4)), build: op("Gemm", ai("transA", 1), ai("transB", 1))},

	{name: "Flatten/axis1", dtype: f64, ins: ins(normal, s(2, 3, 4)), build: op("Flatten")},
	{name: "Flatten/axis2", dtype: f64, ins: ins(normal, s(2, 3, 2, 2)), build: op("Flatten", ai("axis", 2))},
	{name: "Reshape", dtype: f64, ins: ins(normal, s(2, 3, 4)), build: func(b *graph.Builder, x []string) string {
		return b.Reshape(x[0], b.Ints(4, -1))
	}},
	{name: "Transpose/perm", dtype: f64, ins: ins(normal, s(2, 3, 4)), build: op("Transpose", ais("perm", s(2, 0, 1)))},
	{name: "Transpose/default", dtype: f64, ins: ins(normal, s(2, 3)), build: op("Transpose")},
	{name: "Unsqueeze/fan-out", dtype: f64, ins: ins(normal, s(2, 3)), build: func(b *graph.Builder, x []string) string {
		return b.Mul(b.Unsqueeze(x[0], 0, 3), b.Unsqueeze(x[0], 2))
	}},
	{name: "Squeeze/axes", dtype: f64, ins: ins(normal, s(2, 1, 3, 1)), build: func(b *graph.Builder, x []string) string {
		return b.Squeeze(x[0], 1, -1)
	}},
	{name: "Concat/axis1", dtype: f64, ins: ins(normal, s(2, 3), s(2, 1), s(2, 2)), build: op("Concat", ai("axis", 1))},
	{name: "Concat/axis-neg", dtype: f64, ins: ins(normal, s(2, 2, 3), s(2, 2, 3)), build: op("Concat", ai("axis", -1))},
	{name: "ReduceSum/axis-keep", dtype: f64, ins: ins(normal, s(2, 3, 4)), build: func(b *graph.Builder, x []string) string {
		return b.ReduceSum(x[0], true, 1)
	}},
	{name: "ReduceSum/all", dtype: f64, ins: ins(normal, s(2, 3)), build: func(b *graph.Builder, x []string) string {
		return b.ReduceSum(x[0], false)
	}},
	{name: "ReduceMean/axes-drop", dtype: f64, ins: ins(normal, s(2, 3, 4)), build: func(b *graph.Builder, x []string) string {
		return b.ReduceMean(x[0], false, 0, -1)
	}},
	{name: "ReduceMean/all-keep", dtype: f64, ins: ins(normal, s(3, 2)), build: func(b *graph.Builder, x []string) string {
		return b.ReduceMean(x[0], true)
	}},

	{name: "Conv/2d", dtype: f32, ins: ins(normal, s(2, 3, 5, 5), s(4, 3, 3, 3), s(4)), build: op("Conv", ais("pads", s(1, 1, 1, 1)))},
	{name: "Conv/2d-stride-odd", dtype: f32, ins: ins(normal, s(1, 2, 6, 5), s(3, 2, 3, 2)), build: op("Conv", ais("strides", s(2, 2)), ais("pads", s(1, 0, 0, 1)))},
	{name: "Conv/2d-dilation", dtype: f32, ins: ins(normal, s(1, 2, 7, 7), s(2, 2, 3, 3)), build: op("Conv", ais("dilations", s(2, 1)), ais("pads", s(2, 1, 2, 1)))},
	{name: "Conv/2d-groups", dtype: f32, ins: ins(normal, s(2, 4, 5, 5), s(6, 2, 3, 3), s(6)), build: op("Conv", ai("group", 2), ais("strides", s(2, 2)), ais("pads", s(1, 1, 1, 1)))},
	{name: "Conv/2d-depthwise", dtype: f32, ins: ins(normal, s(2, 3, 4, 4), s(3, 1, 3, 3)), build: op("Conv", ai("group", 3), ais("pads", s(1, 1, 1, 1)))},
	{name: "Conv/2d-same-upper", dtype: f32, ins: ins(normal, s(1, 2, 5, 6), s(2, 2, 3, 3)), build: op("Conv", graph.AString("auto_pad", "SAME_UPPER"), ais("strides", s(2, 2)))},
	{name: "Conv/1d", dtype: f32, ins: ins(normal, s(2, 2, 7), s(3, 2, 3), s(3)), build: op("Conv", ais("strides", s(2)), ais("pads", s(1, 1)))},
	{name: "Conv/3d", dtype: f32, ins: ins(normal, s(1, 2, 4, 4, 3), s(2, 2, 2, 3, 2)), build: op("Conv", ais("pads", s(0, 1, 1, 1, 1, 0)), ais("strides", s(1, 2, 1)))},
	{name: "Conv/3d-groups", dtype: f32, ins: ins(normal, s(2, 4, 3, 3, 3), s(4, 2, 2, 2, 2)), build: op("Conv", ai("group", 2))},
	{name: "MaxPool/2d-overlap", dtype: f64, ins: ins(distinct, s(2, 2, 5, 5)), build: op("MaxPool", ais("kernel_shape", s(3, 3)), ais("strides", s(2, 2)), ais("pads", s(1, 1, 1, 1)))},
	{name: "MaxPool/1d", dtype: f64, ins: ins(distinct, s(1, 2, 7)), build: op("MaxPool", ais("kernel_shape", s(2)), ais("strides", s(2)))},
	{name: "MaxPool/3d", dtype: f64, ins: ins(distinct, s(1, 1, 4, 4, 4)), build: op("MaxPool", ais("kernel_shape", s(2, 2, 2)), ais("strides", s(2, 1, 2)))},
	{name: "AveragePool/2d-exclude-pad", dtype: f32, ins: ins(normal, s(2, 2, 5, 5)), build: op("AveragePool", ais("kernel_shape", s(3, 3)), ais("strides", s(2, 2)), ais("pads", s(1, 1, 1, 1)))},
	{name: "AveragePool/2d-include-pad", dtype: f32, ins: ins(normal, s(1, 2, 5, 4)), build: op("AveragePool", ais("kernel_shape", s(3, 2)), ais("pads", s(1, 0, 1, 1)), ai("count_include_pad", 1))},
	{name: "AveragePool/1d", dtype: f32, ins: ins(normal, s(2, 3, 8)), build: op("AveragePool", ais("kernel_shape", s(2)), ais("strides", s(2)))},
	{name: "AveragePool/3d", dtype: f32, ins: ins(normal, s(1, 2, 4, 4, 4)), build: op("AveragePool", ais("kernel_shape", s(2, 2, 2)), ais("strides", s(2, 2, 2)))},
	{name: "GlobalAveragePool/2d", dtype: f32, ins: ins(normal, s(2, 3, 4, 5)), build: op("GlobalAveragePool")},
	{name: "GlobalAveragePool/3d", dtype: f32, ins: ins(normal, s(2, 2, 3, 3, 2)), build: op("GlobalAveragePool")},
	{name: "BatchNormalization/inference", dtype: f64, ins: []in{{shape: s(2, 3, 2, 2)}, {shape: s(3)}, {shape: s(3)}, {shape: s(3), fixed: true}, {shape: s(3), g: positive, fixed: true}},
		build: op("BatchNormalization")},
	{name: "ortrain.BatchNormTraining/training-2d", dtype: f64, trainBN: true, ins: []in{{shape: s(3, 2, 2, 2)}, {shape: s(2)}, {shape: s(2)}, {shape: s(2), fixed: true}, {shape: s(2), g: positive, fixed: true}},
		build: func(b *graph.Builder, x []string) string {
			return b.OpN("BatchNormalization", x, 3, ai("training_mode", 1))[0]
		}},
	{name: "ortrain.BatchNormTraining/training-1d-features", dtype: f64, trainBN: true, ins: []in{{shape: s(4, 3)}, {shape: s(3)}, {shape: s(3)}, {shape: s(3), fixed: true}, {shape: s(3), g: positive, fixed: true}},
		build: op("BatchNormalization")},
	{name: "ortrain.BatchNormTraining/training-3d", dtype: f64, trainBN: true, ins: []in{{shape: s(2, 3, 2, 3, 2)}, {shape: s(3)}, {shape: s(3)}, {shape: s(3), fixed: true}, {shape: s(3), g: positive, fixed: true}},
		build: op("BatchNormalization", af("epsilon", 1e-3))},
}

func TestRulesAgainstFiniteDifferences(t *testing.T) {
	covered := map[string]bool{}
	for i, c := range ruleCases {
		t.Run(c.name, func(t *testing.T) { checkFD(t, c, uint64(i)) })
		covered[opName(c.name)] = true
	}
	for _, op := range autodiffOps() {
		if !covered[op] {
			t.Errorf("rule %s has no finite-difference case", op)
		}
	}
}

func opName(name string) string {
	for i, r := range name {
		if r == '/' || r == '-' {
			return name[:i]
		}
	}
	return name
}
