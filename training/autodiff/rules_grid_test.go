package autodiff_test

import (
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/graph"
)

// Cases for rules_grid.go. GridSample is piecewise linear in each grid
// coordinate, with kinks where a coordinate crosses a pixel (and, for
// reflection, the reflection points). ONNX Runtime's CPU kernel has a
// double version from opset 20 (mode "linear"): there grids are drawn from
// N(0,1), a third of the points outside [-1, 1], and a kink within h = 1e-6
// of a probe is improbable. At opset 17 (mode "bilinear", float only) h =
// 1e-2 would cross kinks, so the grid is a constant at a quarter past a
// pixel (inside and outside X) plus 0.25 pixel times the input from
// U(-0.8, 0.8): every probe stays 0.05 pixel from a kink.

func init() { ruleCases = append(ruleCases, gridCases...) }

// gridSample is GridSample on x[0], x[1]; its output shape is inferred.
func gridSample(attrs ...*graph.Attr) func(b *graph.Builder, x []string) string {
	return func(b *graph.Builder, x []string) string {
		return b.Op("GridSample", []string{x[0], x[1]}, attrs...)
	}
}

// gridNearPixels is gridSample with grid = base + 0.25 pixel · x[1], base
// at pixel coordinates u + 0.25 for integers u from -2 to the size along
// each axis (so some points fall outside X).
func gridNearPixels(dt ort.DType, xs, gs []int64, align bool, attrs ...*graph.Attr) func(b *graph.Builder, x []string) string {
	return func(b *graph.Builder, x []string) string {
		k := len(gs) - 2
		total := ort.Numel(gs)
		base := make([]float64, total)
		scale := make([]float64, total)
		for i := range base {
			j := i % k              // grid component: 0 is x (the last axis)
			size := xs[len(xs)-1-j] // the size along its axis
			u := -1.75 + float64((i*5+j*3)%int(size+3))
			if align {
				base[i] = 2*u/float64(size-1) - 1
				scale[i] = 0.25 * 2 / float64(size-1)
			} else {
				base[i] = (2*u+1)/float64(size) - 1
				scale[i] = 0.25 * 2 / float64(size)
			}
		}
		bt, _ := graph.Floats("", dt, gs, base)
		st, _ := graph.Floats("", dt, gs, scale)
		grid := b.Add(b.Const(bt), b.Mul(x[1], b.Const(st)))
		return b.Op("GridSample", []string{x[0], grid}, attrs...)
	}
}

var (
	as      = graph.AString
	gridX2  = s(2, 3, 4, 5)
	gridG2  = s(2, 3, 2, 2)
	gridX3  = s(1, 2, 3, 4, 3)
	gridG3  = s(1, 2, 2, 3, 3)
	gridX2f = s(1, 2, 4, 5)
	gridG2f = s(1, 3, 4, 2)
)

var gridCases = []fdCase{
	{name: "GridSample/linear-zeros", dtype: f64, opset: 20, ins: ins(normal, gridX2, gridG2), build: gridSample(as("mode", "linear"))},
	{name: "GridSample/linear-zeros-align", dtype: f64, opset: 20, ins: ins(normal, gridX2, gridG2), build: gridSample(as("mode", "linear"), ai("align_corners", 1))},
	{name: "GridSample/linear-border", dtype: f64, opset: 20, ins: ins(normal, gridX2, gridG2), build: gridSample(as("padding_mode", "border"))},
	{name: "GridSample/linear-border-align", dtype: f64, opset: 20, ins: ins(normal, gridX2, gridG2), build: gridSample(as("padding_mode", "border"), ai("align_corners", 1))},
	{name: "GridSample/linear-reflection", dtype: f64, opset: 20, ins: ins(normal, gridX2, gridG2), build: gridSample(as("padding_mode", "reflection"))},
	{name: "GridSample/linear-reflection-align", dtype: f64, opset: 20, ins: ins(normal, gridX2, gridG2), build: gridSample(as("padding_mode", "reflection"), ai("align_corners", 1))},
	{name: "GridSample/linear-reflection-wide", dtype: f64, opset: 20, ins: []in{{shape: s(1, 2, 3, 2), g: normal}, {shape: s(1, 4, 3, 2), g: wide}},
		build: gridSample(as("padding_mode", "reflection"))},
	{name: "GridSample/linear-size1-align", dtype: f64, opset: 20, ins: ins(normal, s(1, 2, 1, 3), s(1, 2, 3, 2)),
		build: gridSample(as("padding_mode", "reflection"), ai("align_corners", 1))},
	{name: "GridSample/nearest-zeros", dtype: f64, opset: 20, ins: ins(normal, gridX2, gridG2), build: gridSample(as("mode", "nearest"))},
	{name: "GridSample/nearest-reflection-align", dtype: f64, opset: 20, ins: ins(normal, gridX2, gridG2),
		build: gridSample(as("mode", "nearest"), as("padding_mode", "reflection"), ai("align_corners", 1))},
	{name: "GridSample/nearest-border", dtype: f64, opset: 20, ins: ins(normal, gridX2, gridG2), build: gridSample(as("mode", "nearest"), as("padding_mode", "border"))},
	{name: "GridSample/3d-zeros", dtype: f64, opset: 20, ins: ins(normal, gridX3, gridG3), build: gridSample()},
	{name: "GridSample/3d-border-align", dtype: f64, opset: 20, ins: ins(normal, gridX3, gridG3), build: gridSample(as("padding_mode", "border"), ai("align_corners", 1))},
	{name: "GridSample/3d-reflection", dtype: f64, opset: 20, ins: ins(normal, gridX3, gridG3), build: gridSample(as("padding_mode", "reflection"))},
	{name: "GridSample/3d-nearest", dtype: f64, opset: 20, ins: ins(normal, gridX3, gridG3), build: gridSample(as("mode", "nearest"))},
	{name: "GridSample/bilinear-zeros", dtype: f32, ins: []in{{shape: gridX2f, g: normal}, {shape: gridG2f, g: unit}},
		build: gridNearPixels(f32, gridX2f, gridG2f, false, as("mode", "bilinear"))},
	{name: "GridSample/bilinear-border-align", dtype: f32, ins: []in{{shape: gridX2f, g: normal}, {shape: gridG2f, g: unit}},
		build: gridNearPixels(f32, gridX2f, gridG2f, true, as("padding_mode", "border"), ai("align_corners", 1))},
	{name: "GridSample/bilinear-reflection", dtype: f32, ins: []in{{shape: gridX2f, g: normal}, {shape: gridG2f, g: unit}},
		build: gridNearPixels(f32, gridX2f, gridG2f, false, as("padding_mode", "reflection"))},
	{name: "GridSample/bilinear-reflection-align", dtype: f32, ins: []in{{shape: gridX2f, g: normal}, {shape: gridG2f, g: unit}},
		build: gridNearPixels(f32, gridX2f, gridG2f, true, as("padding_mode", "reflection"), ai("align_corners", 1))},
}
