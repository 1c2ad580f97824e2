package autodiff_test

import (
	"math"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/graph"
)

func init() { ruleCases = append(ruleCases, resizeCases...) }

// resizeCases: constant scales that differ from the ratio of the sizes.
var resizeCases = []fdCase{
	{name: "Resize/linear-2d-scale-not-ratio", dtype: f32, ins: ins(normal, s(1, 1, 2, 4)), build: resize(nil, fs(1, 1, 0.6, 0.6), "linear", "half_pixel", "")},
	{name: "Resize/linear-2d-kept-size-interpolates", dtype: f32, ins: ins(normal, s(1, 1, 3, 5)), build: resize(nil, fs(1, 1, 1.2, 1.5), "linear", "asymmetric", "")},
	{name: "Resize/nearest-2d-no-size-changes", dtype: f32, ins: ins(normal, s(1, 1, 3, 5)), build: resize(nil, fs(1, 1, 1.2, 1), "nearest", "tf_half_pixel_for_nn", "ceil")},
}

// resizeAt is Resize of x[0] by the scales x[1], a graph input: the rule
// reads them at run time.
func resizeAt(attrs ...*graph.Attr) func(b *graph.Builder, x []string) string {
	return func(b *graph.Builder, x []string) string {
		return b.Op("Resize", []string{x[0], "", x[1]}, attrs...)
	}
}

// resizeOut is ONNX Runtime's output shape, floor(in * scale) in float32.
func resizeOut(in []int64, scales []float64) []int64 {
	out := make([]int64, len(in))
	for i, d := range in {
		out[i] = int64(math.Floor(float64(float32(d) * float32(scales[i]))))
	}
	return out
}

// resizeCase is a Resize with scales fed at run time on drawn inputs (the
// values of X given for the test suite's case).
func resizeCase(name string, x []int64, xv []float64, scales []float64, attrs ...*graph.Attr) exactCase {
	if xv == nil {
		xv = drawn(name, normal, int(ort.Numel(x)))
	}
	return exactCase{name: name, opset: 13, out: resizeOut(x, scales), build: resizeAt(attrs...), ins: []exactIn{
		{name: "X", dt: f32, shape: x, v: xv, wrt: true},
		{name: "scales", dt: f32, shape: s(int64(len(scales))), v: scales},
	}}
}

// TestResizeScalesAtRunTime: Resize is linear in X for fixed scales, so
// its gradient must match finite differences to the float32 tolerance of
// fd_test.go (h = 1e-2, 3e-3 absolute + 1e-2 relative, rounding only). The
// first case is ONNX's test_resize_downsample_scales_linear (a 0.6 scale
// taking 2 rows to 1: the coordinates follow 0.6, not the 0.5 ratio of the
// sizes); the others are not in ONNX's suite.
func TestResizeScalesAtRunTime(t *testing.T) {
	lin, near := as("mode", "linear"), as("mode", "nearest")
	ctm := func(m string) *graph.Attr { return as("coordinate_transformation_mode", m) }
	for _, c := range []exactCase{
		resizeCase("test_resize_downsample_scales_linear", s(1, 1, 2, 4), ramp(8), fs(1, 1, 0.6, 0.6), lin),
		resizeCase("test_resize_downsample_scales_linear_align_corners", s(1, 1, 2, 4), ramp(8), fs(1, 1, 0.6, 0.6), lin, ctm("align_corners")),
		resizeCase("linear-3d-half-pixel-downsample", s(1, 2, 5, 4, 6), nil, fs(1, 1, 0.7, 0.75, 0.45), lin),
		resizeCase("linear-2d-symmetric-mixed", s(2, 1, 5, 3), nil, fs(1, 1, 0.6, 1.8), lin, ctm("half_pixel_symmetric")),
		resizeCase("linear-2d-pytorch-to-one", s(1, 1, 3, 7), nil, fs(1, 1, 0.4, 0.3), lin, ctm("pytorch_half_pixel")),
		resizeCase("linear-2d-asymmetric-kept-size", s(1, 1, 3, 5), nil, fs(1, 1, 1.2, 1.5), lin, ctm("asymmetric")),
		resizeCase("linear-2d-no-size-changes", s(1, 1, 3, 5), nil, fs(1, 1, 1.2, 1), lin, ctm("asymmetric")),
		resizeCase("nearest-2d-round-down-up", s(1, 2, 5, 3), nil, fs(1, 1, 0.6, 2.5), near),
		resizeCase("nearest-1d-tf-ceil", s(2, 1, 4), nil, fs(1, 1, 1.75), near, ctm("tf_half_pixel_for_nn"), as("nearest_mode", "ceil")),
	} {
		t.Run(c.name, func(t *testing.T) { checkExact(t, c) })
	}
}
