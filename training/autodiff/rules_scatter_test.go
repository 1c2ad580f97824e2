package autodiff_test

import "github.com/ortrain/ortrain/training/graph"

// Cases for rules_scatter.go, in float64 where ONNX Runtime's CPU has the
// kernels. Indices are constants; repeated ones check that a gather's
// gradient adds up, TopK inputs are distinct so the selection is stable
// under the probe.

func init() { ruleCases = append(ruleCases, scatterCases...) }

var scatterCases = []fdCase{
	{name: "GatherElements/axis1-repeats", dtype: f64, ins: ins(normal, s(2, 3)), build: func(b *graph.Builder, x []string) string {
		return b.Op("GatherElements", []string{x[0], idx(b, s(2, 4), 0, 2, 2, 1, 1, 1, 0, 2)}, ai("axis", 1))
	}},
	{name: "GatherElements/axis0-3d", dtype: f32, ins: ins(normal, s(3, 2, 2)), build: func(b *graph.Builder, x []string) string {
		return b.Op("GatherElements", []string{x[0], idx(b, s(2, 2, 2), 2, 0, 1, 1, 0, 0, 2, 2)}, ai("axis", 0))
	}},
	{name: "GatherND/pairs-repeats", dtype: f64, ins: ins(normal, s(3, 4)), build: func(b *graph.Builder, x []string) string {
		return b.Op("GatherND", []string{x[0], idx(b, s(3, 2), 0, 1, 2, 3, 0, 1)})
	}},
	{name: "GatherND/rows", dtype: f64, ins: ins(normal, s(3, 2, 2)), build: func(b *graph.Builder, x []string) string {
		return b.Op("GatherND", []string{x[0], idx(b, s(2, 1), 2, 0)})
	}},
	{name: "ScatterElements/none", dtype: f64, ins: ins(normal, s(3, 4), s(2, 4)), build: func(b *graph.Builder, x []string) string {
		return b.Op("ScatterElements", []string{x[0], idx(b, s(2, 4), 0, 2, 1, 0, 2, 0, 0, 1), x[1]}, ai("axis", 0))
	}},
	{name: "ScatterElements/add-repeats", dtype: f32, ins: ins(normal, s(2, 3), s(2, 2)), build: func(b *graph.Builder, x []string) string {
		return b.Op("ScatterElements", []string{x[0], idx(b, s(2, 2), 1, 1, 0, 2), x[1]}, ai("axis", 1), graph.AString("reduction", "add"))
	}},
	{name: "ScatterND/none-rows", dtype: f64, ins: ins(normal, s(4, 3), s(2, 3)), build: func(b *graph.Builder, x []string) string {
		return b.Op("ScatterND", []string{x[0], idx(b, s(2, 1), 3, 1), x[1]})
	}},
	{name: "ScatterND/add-elements", dtype: f32, ins: ins(normal, s(2, 3), s(3)), build: func(b *graph.Builder, x []string) string {
		return b.Op("ScatterND", []string{x[0], idx(b, s(3, 2), 0, 1, 1, 2, 0, 1), x[1]}, graph.AString("reduction", "add"))
	}},
	{name: "TopK/last-axis", dtype: f64, ins: ins(distinct, s(2, 5)), build: func(b *graph.Builder, x []string) string {
		return b.OpN("TopK", []string{x[0], idx(b, s(1), 2)}, 2)[0]
	}},
	{name: "TopK/axis0-smallest", dtype: f32, ins: ins(distinct, s(4, 3)), build: func(b *graph.Builder, x []string) string {
		return b.OpN("TopK", []string{x[0], idx(b, s(1), 3)}, 2, ai("axis", 0), ai("largest", 0))[0]
	}},
	{name: "Tile/2d", dtype: f64, ins: ins(normal, s(2, 3)), build: func(b *graph.Builder, x []string) string {
		return b.Op("Tile", []string{x[0], idx(b, s(2), 3, 2)})
	}},
	{name: "Tile/3d-one-axis", dtype: f64, ins: ins(normal, s(1, 2, 2)), build: func(b *graph.Builder, x []string) string {
		return b.Op("Tile", []string{x[0], idx(b, s(3), 1, 1, 4)})
	}},
	{name: "DepthToSpace/DCR", dtype: f64, ins: ins(normal, s(1, 8, 2, 3)), build: op("DepthToSpace", ai("blocksize", 2))},
	{name: "DepthToSpace/CRD", dtype: f64, ins: ins(normal, s(2, 8, 2, 2)), build: op("DepthToSpace", ai("blocksize", 2), graph.AString("mode", "CRD"))},
	{name: "SpaceToDepth", dtype: f64, ins: ins(normal, s(1, 2, 4, 6)), build: op("SpaceToDepth", ai("blocksize", 2))},
}
