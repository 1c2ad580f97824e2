package autodiff

import (
	"math"
	"slices"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// resizeGrad: nearest and linear Resize are separable linear maps, one
// matrix M (out × in) per axis whose size changes, built here from the
// same coordinate transform ONNX Runtime applies; the gradient applies each
// Mᵀ to dY along its axis (a MatMul with that axis moved last). Linear on
// three axes is trilinear, as in 3D decoders. Sizes of the resized axes must
// be static; an axis of unknown size (the batch) must have scale 1 (with
// scales fed at run time that is taken, not checked, as no other scale
// keeps a dynamic size unknown on both sides in what exporters write).
func resizeGrad(b *B, n *N, dy string) string {
	xi, yi := b.Info(x(n)), b.Info(y(n))
	mode := n.String("mode", "nearest")
	ctm := n.String("coordinate_transformation_mode", "half_pixel")
	if mode != "nearest" && mode != "linear" || ctm == "tf_crop_and_resize" || n.Int("antialias", 0) != 0 || n.Attr("axes") != nil {
		return b.Fail("Resize mode %s, coordinate_transformation_mode %s, antialias or axes: no gradient rule (nearest and linear are supported)", mode, ctm)
	}
	if !xi.Known || !yi.Known {
		return b.Fail("Resize needs known ranks, has %v -> %v", xi, yi)
	}
	nearest := n.String("nearest_mode", "round_prefer_floor")
	if _, ok := resizeMatrix(mode, ctm, nearest, 1, 1, 1); !ok {
		return b.Fail("Resize coordinate_transformation_mode %s or nearest_mode %s has no gradient rule", ctm, nearest)
	}
	// With scales given, ONNX Runtime maps coordinates with those scales,
	// not with out/in (a 0.6 scale takes 2 rows to 1, whose ratio is 0.5),
	// so the scales are read from the constant or, when they are fed at
	// run time (a float initializer becomes a graph input in the training
	// graph), gathered in the backward graph. Only with sizes given is
	// the scale out/in.
	var scales []float64
	runtime := ""
	if sc := n.Input(2); sc != "" {
		if t, ok := b.G.Const(sc); !ok {
			if n.Input(3) == "" {
				runtime = sc
			}
		} else if graph.Numel(t) > 0 {
			scales, _ = graph.FloatData(t)
		}
	}
	r := xi.Rank()
	if slices.Equal(xi.Shape, yi.Shape) {
		// ONNX Runtime copies X when no size changes, whatever the scales
		// (1.2 on 3 rows keeps 3 rows and would otherwise interpolate).
		return b.Identity(dy)
	}
	if len(scales) != 0 && len(scales) != r {
		return b.Fail("Resize has %d scales for an input of rank %d", len(scales), r)
	}
	g := dy
	for a := r - 1; a >= 0; a-- {
		in, out := xi.Shape[a], yi.Shape[a]
		var mt string
		switch {
		case runtime != "" && in < 0 && out < 0:
			// A dynamic axis (batch, channels) keeps its size only with
			// scale 1, which ONNX Runtime copies.
			continue
		case runtime != "":
			if in < 0 || out < 0 {
				return b.Fail("Resize along axis %d needs static sizes, has %v -> %v", a, xi, yi)
			}
			mt = resizeMatrixAt(b, mode, ctm, nearest, in, out, runtime, int64(a), xi.DType)
		default:
			scale := float64(out) / float64(in)
			if scales != nil {
				scale = float64(float32(scales[a]))
			}
			if scale == 1 && in == out || (in < 0 || out < 0) && scale == 1 {
				// ONNX Runtime copies an axis of scale 1 whatever the
				// coordinate transform would say (tf_half_pixel_for_nn with
				// ceil would shift it).
				continue
			}
			if in < 0 || out < 0 {
				return b.Fail("Resize along axis %d needs static sizes, has %v -> %v", a, xi, yi)
			}
			m, _ := resizeMatrix(mode, ctm, nearest, in, out, scale)
			t, err := graph.Floats("", xi.DType, []int64{out, in}, m)
			if err != nil {
				return b.Fail("%v", err)
			}
			mt = b.Const(t)
		}
		perm := span(0, r)
		perm[a], perm[r-1] = perm[r-1], perm[a]
		if a != r-1 {
			g = b.Transpose(g, perm...)
		}
		g = b.MatMul(g, mt)
		if a != r-1 {
			g = b.Transpose(g, perm...)
		}
	}
	return g
}

// resizeMatrix is the row-major out × in matrix of one axis of Resize:
// row o holds the weights output o takes from each input position.
func resizeMatrix(mode, ctm, nearest string, in, out int64, scale float64) ([]float64, bool) {
	m := make([]float64, in*out)
	for o := range out {
		xo := float64(o)
		var xi float64
		switch ctm {
		case "half_pixel":
			xi = (xo+0.5)/scale - 0.5
		case "half_pixel_symmetric":
			adj := float64(out) / (scale * float64(in))
			xi = float64(in)/2*(1-adj) + (xo+0.5)/scale - 0.5
		case "pytorch_half_pixel":
			if out > 1 {
				xi = (xo+0.5)/scale - 0.5
			}
		case "align_corners":
			if out > 1 {
				xi = xo * float64(in-1) / float64(out-1)
			}
		case "asymmetric":
			xi = xo / scale
		case "tf_half_pixel_for_nn":
			xi = (xo + 0.5) / scale
		default:
			return nil, false
		}
		clamp := func(v float64) int64 { return min(max(int64(v), 0), in-1) }
		if mode == "nearest" {
			var k float64
			switch nearest {
			case "round_prefer_floor":
				k = math.Round(xi)
				if xi == math.Floor(xi)+0.5 {
					k = math.Floor(xi)
				}
			case "round_prefer_ceil":
				k = math.Floor(xi + 0.5)
			case "floor":
				k = math.Floor(xi)
			case "ceil":
				k = math.Ceil(xi)
			default:
				return nil, false
			}
			m[o*in+clamp(max(k, 0))] = 1
			continue
		}
		xi = min(max(xi, 0), float64(in-1))
		lo := clamp(xi)
		hi := min(lo+1, in-1)
		f := xi - float64(lo)
		if lo == hi {
			f = 0.5
		}
		m[o*in+lo] += 1 - f
		m[o*in+hi] += f
	}
	return m, true
}

// resizeMatrixAt is resizeMatrix built in the graph from the scale of axis
// a read from the tensor scales at run time, in float32 and in ONNX
// Runtime's order of operations so that its roundings fall on the same
// side; the result is cast to dt. A linear row holds the tent weights
// max(0, 1 - |x - i|) around the clamped source coordinate x (1 - f and f
// on its two neighbours, 1 on the last pixel); a nearest row is 1 at the
// rounded, clamped coordinate. An axis whose size does not change is
// copied when its scale is 1, as ONNX Runtime does.
func resizeMatrixAt(b *B, mode, ctm, nearest string, in, out int64, scales string, a int64, dt dtype.DType) string {
	f32 := dtype.Float32
	c := func(v float64) string { return b.Scalar(f32, v) }
	ramp := func(k int64, shape ...int64) string {
		v := make([]float64, k)
		for i := range v {
			v[i] = float64(i)
		}
		t, _ := graph.Floats("", f32, shape, v)
		return b.Const(t)
	}
	s := b.Cast(b.Gather(scales, b.Const(graph.Int64s("", nil, []int64{a})), 0), f32)
	xo := ramp(out, out, 1) // output positions, a column
	ii := ramp(in, 1, in)   // input positions, a row
	halfPixel := func() string { return b.Sub(b.Div(b.Add(xo, c(0.5)), s), c(0.5)) }
	var xi string
	switch ctm {
	case "half_pixel":
		xi = halfPixel()
	case "half_pixel_symmetric":
		adj := b.Div(c(float64(out)), b.Mul(s, c(float64(in))))
		xi = b.Add(b.Mul(c(float64(in)/2), b.Sub(c(1), adj)), halfPixel())
	case "pytorch_half_pixel":
		xi = halfPixel()
		if out == 1 {
			xi = b.Mul(xo, c(0))
		}
	case "align_corners":
		xi = b.Mul(xo, c(0))
		if out > 1 {
			xi = b.Mul(xo, c(float64(in-1)/float64(out-1)))
		}
	case "asymmetric":
		xi = b.Div(xo, s)
	case "tf_half_pixel_for_nn":
		xi = b.Div(b.Add(xo, c(0.5)), s)
	default:
		return b.Fail("Resize coordinate_transformation_mode %s has no gradient rule", ctm)
	}
	clamp := func(v string) string { return b.Min(b.Max(v, c(0)), c(float64(in-1))) }
	var m string
	if mode == "nearest" {
		var k string
		switch nearest {
		case "round_prefer_floor":
			k = b.Op("Ceil", []string{b.Sub(xi, c(0.5))})
		case "round_prefer_ceil":
			k = b.Op("Floor", []string{b.Add(xi, c(0.5))})
		case "floor":
			k = b.Op("Floor", []string{xi})
		case "ceil":
			k = b.Op("Ceil", []string{xi})
		default:
			return b.Fail("Resize nearest_mode %s has no gradient rule", nearest)
		}
		m = b.Cast(b.Equal(clamp(k), ii), f32)
	} else {
		m = b.Relu(b.Sub(c(1), b.Abs(b.Sub(clamp(xi), ii))))
	}
	if in == out {
		eye := make([]float64, in*in)
		for i := range in {
			eye[i*in+i] = 1
		}
		t, _ := graph.Floats("", f32, []int64{in, in}, eye)
		m = b.Where(b.Equal(s, c(1)), b.Const(t), m)
	}
	if dt != f32 {
		m = b.Cast(m, dt)
	}
	return m
}
