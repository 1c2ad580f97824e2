package autodiff_test

import (
	"testing"

	"github.com/ortrain/ortrain/training/graph"
)

// onnxGrid is the grid of ONNX's test_gridsample_* cases on X of 3 rows
// and 2 columns. With align_corners = 0, x = g + 0.5 and y = (3g + 2)/2,
// so g = -0.5, 0.5 (x) and 0 (y) put points exactly on pixel centres,
// where bilinear sampling has a kink: its slope jumps from the left cell's
// to the right cell's (from the zero padding's to the edge pixel's at x = 0).
var onnxGrid = []float64{-1, -1, -0.5, -0.5, -0.2, -0.2, 0, 0, 0, 0, -0.2, -0.2, 0.5, 0.5, 1, 1}

// TestGridSampleOnPixelCentres: ONNX's test_gridsample_bilinear puts grid
// points exactly on pixel centres, kinks of bilinear sampling, where the
// central differences of the comparison (rel. error 0.513; 0.38
// with this projection, checked below) average the two one-sided slopes.
// The X gradient must match central differences (GridSample is linear in
// X); the grid gradient must lie between the one-sided slopes: the floor
// takes the right-hand one at a pixel centre, as PyTorch's backward does,
// and a clipped coordinate exactly on the last pixel gets the clipped
// side's 0 (border and reflection; before, it took the slope towards a
// zero corner beyond the edge, outside both). Tolerances are fd_test.go's
// (float32: h = 1e-2, 3e-3 + 1e-2 relative; float64: h = 1e-6, 1e-6 +
// 1e-5 relative).
func TestGridSampleOnPixelCentres(t *testing.T) {
	x := []float64{0, 1, 2, 3, 4, 5}
	onnx := func(name string, attrs ...*graph.Attr) exactCase {
		return exactCase{name: name, opset: 16, build: gridSample(append([]*graph.Attr{as("mode", "bilinear")}, attrs...)...), ins: []exactIn{
			{name: "X", dt: f32, shape: s(1, 1, 3, 2), v: x, wrt: true},
			{name: "Grid", dt: f32, shape: s(1, 2, 4, 2), v: onnxGrid, wrt: true, kinks: true},
		}}
	}
	// 3-D, float64: each coordinate on a voxel centre, half-way, or outside.
	xs, ys, zs := []float64{-1.25, -0.75, 0, 0.75, 1.25}, []float64{-1.5, -0.5, 0, 0.5, 1.5}, []float64{-1, 0, 1, -0.5, 0.5}
	var g3 []float64
	for p := range 12 {
		g3 = append(g3, xs[p%5], ys[(p/2)%5], zs[(p*3)%5])
	}
	cases := []exactCase{
		onnx("test_gridsample_bilinear"),
		onnx("bilinear-border-on-centres", as("padding_mode", "border")),
		onnx("bilinear-reflection-on-centres", as("padding_mode", "reflection")),
		onnx("bilinear-zeros-align-on-centres", ai("align_corners", 1)),
		{name: "3d-zeros-on-centres", opset: 20, build: gridSample(), ins: []exactIn{
			{name: "X", dt: f64, shape: s(1, 2, 3, 2, 4), v: drawn("3d", normal, 48), wrt: true},
			{name: "Grid", dt: f64, shape: s(1, 2, 2, 3, 3), v: g3, wrt: true, kinks: true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkExact(t, c) })
	}
	// Central differences straddle the kinks: they must still agree on X
	// and disagree on the grid, or the points are not where this test
	// means them to be.
	c := onnx("test_gridsample_bilinear, central differences")
	c.ins[1].kinks = false
	a, num := measureExact(t, c)
	if rel := relError(a, map[string][]float64{"X": num["X"]}); rel > 1e-4 {
		t.Errorf("X gradient: rel. error %.3g against central differences", rel)
	}
	rel := relError(a, num)
	t.Logf("%s: |analytic - numeric| / |numeric| = %.3g", c.name, rel)
	if rel < 0.1 {
		t.Errorf("central differences agree on pixel centres (rel. error %.3g): the points are not on kinks", rel)
	}
}
