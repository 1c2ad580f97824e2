package autodiff

import (
	"math"

	"github.com/ortrain/ortrain/training/graph"
)

// resizeGrad: nearest and linear Resize are separable linear maps, one
// matrix M (out × in) per axis whose size changes, built here from the
// same coordinate transform ONNX Runtime applies; the gradient applies each
// Mᵀ to dY along its axis (a MatMul with that axis moved last). Linear on
// three axes is trilinear, as in 3D decoders. Sizes of the resized axes must
// be static; an axis of unknown size (the batch) must have scale 1.
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
	var scales []float64
	if t, ok := b.G.Const(n.Input(2)); ok && n.Input(2) != "" && graph.Numel(t) > 0 {
		scales, _ = graph.FloatData(t)
	}
	r := xi.Rank()
	g := dy
	for a := r - 1; a >= 0; a-- {
		in, out := xi.Shape[a], yi.Shape[a]
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
		m, ok := resizeMatrix(mode, ctm, n.String("nearest_mode", "round_prefer_floor"), in, out, scale)
		if !ok {
			return b.Fail("Resize coordinate_transformation_mode %s or nearest_mode %s has no gradient rule", ctm, n.String("nearest_mode", ""))
		}
		mt, err := graph.Floats("", xi.DType, []int64{out, in}, m)
		if err != nil {
			return b.Fail("%v", err)
		}
		perm := span(0, r)
		perm[a], perm[r-1] = perm[r-1], perm[a]
		if a != r-1 {
			g = b.Transpose(g, perm...)
		}
		g = b.MatMul(g, b.Const(mt))
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
