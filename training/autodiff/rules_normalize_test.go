package autodiff_test

import "github.com/ortrain/ortrain/training/graph"

// Cases for rules_normalize.go. LRN has only a float32, 4-D, odd-size kernel on
// ONNX Runtime's CPU (float32 tolerances of fd_test.go); a size wider than
// the channels covers the clipped ends of the window.
// MeanVarianceNormalization also runs in float32; LpNormalization, CumSum
// in float64 (p = 1 keeps inputs away from 0, where |x| kinks).

func init() { ruleCases = append(ruleCases, lrnCases...) }

func cumSum(axis, exclusive, reverse int64) func(b *graph.Builder, x []string) string {
	return func(b *graph.Builder, x []string) string {
		return b.Op("CumSum", []string{x[0], idx(b, nil, axis)}, ai("exclusive", exclusive), ai("reverse", reverse))
	}
}

var lrnCases = []fdCase{
	{name: "LRN/size3", dtype: f32, ins: ins(normal, s(2, 5, 3, 2)), build: op("LRN", ai("size", 3), af("alpha", 0.5), af("beta", 0.75), af("bias", 1))},
	{name: "LRN/size5", dtype: f32, ins: ins(normal, s(1, 6, 2, 2)), build: op("LRN", ai("size", 5), af("alpha", 0.3), af("beta", 0.6), af("bias", 2))},
	{name: "LRN/size7-wider-than-channels", dtype: f32, ins: ins(normal, s(2, 4, 2, 3)), build: op("LRN", ai("size", 7), af("alpha", 1), af("beta", 0.5), af("bias", 1.5))},
	{name: "LpNormalization/p2-last", dtype: f64, ins: ins(normal, s(3, 4)), build: op("LpNormalization")},
	{name: "LpNormalization/p2-axis1", dtype: f64, ins: ins(normal, s(2, 3, 4)), build: op("LpNormalization", ai("axis", 1))},
	{name: "MeanVarianceNormalization/default-axes", dtype: f32, ins: ins(normal, s(2, 3, 2, 3)), build: op("MeanVarianceNormalization")},
	{name: "MeanVarianceNormalization/last-axis", dtype: f32, ins: ins(normal, s(3, 5)), build: op("MeanVarianceNormalization", ais("axes", []int64{1}))},
	{name: "CumSum/axis1", dtype: f64, ins: ins(normal, s(2, 4, 3)), build: cumSum(1, 0, 0)},
	{name: "CumSum/exclusive-reverse", dtype: f64, ins: ins(normal, s(2, 5)), build: cumSum(-1, 1, 1)},
	{name: "CumSum/reverse", dtype: f64, ins: ins(normal, s(5)), build: cumSum(0, 0, 1)},
	{name: "CastLike/f32-f64-f32", dtype: f32, ins: ins(normal, s(2, 3)), build: func(b *graph.Builder, x []string) string {
		wide := b.Op("CastLike", []string{x[0], b.Const(graph.Float64s("", nil, []float64{0}))})
		return b.Op("CastLike", []string{b.Exp(wide), x[0]})
	}},
	{name: "LpNormalization/p1-axis0", dtype: f64, ins: ins(away, s(3, 4)), build: op("LpNormalization", ai("axis", 0), ai("p", 1))},
}
