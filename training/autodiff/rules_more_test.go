package autodiff_test

import (
	"math"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/graph"
)

// Cases for the rules decoders, quantisers and transformers need. Ops whose
// ONNX Runtime CPU kernel has no double version (Erf, Softplus, Gelu,
// Resize, the convolutions, the normalisations) run in float32 under the
// float32 tolerances of fd_test.go; for the non-linear ones among them
// (Erf, Softplus, Gelu, the normalisations) central differences with
// h = 1e-2 add a truncation error h²·|f”'|/6 ≈ 2e-5·|f”'|, well inside
// 3e-3 for the O(1) third derivatives of inputs drawn from N(0,1).

func init() { ruleCases = append(ruleCases, moreCases...) }

var af = graph.AFloat

func idx(b *graph.Builder, dims []int64, v ...int64) string {
	return b.Const(graph.Int64s("", dims, v))
}

func boolConst(b *graph.Builder, dims []int64, v ...bool) string {
	raw := make([]byte, len(v))
	for i, t := range v {
		if t {
			raw[i] = 1
		}
	}
	return b.Const(graph.Raw("", ort.Bool, dims, raw))
}

var moreCases = []fdCase{
	{name: "Erf", dtype: f32, ins: ins(normal, s(2, 3)), build: op("Erf")},
	{name: "Erf/gelu-exported-erf-form", dtype: f32, ins: ins(normal, s(3, 4)), build: func(b *graph.Builder, x []string) string { return b.Gelu(x[0]) }},
	// torch.onnx's form, x·A first, then the half; and a chain with other
	// constants (h 0.3, c 2, u = 0.9·x), which geluChainGrad also takes.
	{name: "Erf/gelu-torch-export-form", dtype: f32, ins: ins(normal, s(3, 4)), build: func(b *graph.Builder, x []string) string {
		a := b.Add(b.Erf(b.Div(x[0], b.Scalar(dtype.Float32, math.Sqrt2))), b.Scalar(dtype.Float32, 1))
		return b.Mul(b.Mul(x[0], a), b.Scalar(dtype.Float32, 0.5))
	}},
	{name: "Erf/gelu-form-other-constants", dtype: f32, ins: ins(normal, s(3, 4)), build: func(b *graph.Builder, x []string) string {
		a := b.Add(b.Scalar(dtype.Float32, 2), b.Erf(b.Mul(b.Scalar(dtype.Float32, 0.9), x[0])))
		return b.Mul(a, b.Mul(b.Scalar(dtype.Float32, 0.3), x[0]))
	}},
	// Without the half (graph.SinkScales moves it onto the next product),
	// and with a scale by −2, a power of two the rule applies to the
	// incoming gradient.
	{name: "Erf/gelu-form-unscaled", dtype: f32, ins: ins(normal, s(3, 4)), build: func(b *graph.Builder, x []string) string {
		return b.Mul(x[0], b.Add(b.Erf(b.Div(x[0], b.Scalar(dtype.Float32, math.Sqrt2))), b.Scalar(dtype.Float32, 1)))
	}},
	{name: "Erf/gelu-form-power-of-two-scale", dtype: f32, ins: ins(normal, s(3, 4)), build: func(b *graph.Builder, x []string) string {
		a := b.Add(b.Erf(b.Div(x[0], b.Scalar(dtype.Float32, 1.3))), b.Scalar(dtype.Float32, 0.5))
		return b.Mul(b.Mul(x[0], b.Scalar(dtype.Float32, -2)), a)
	}},
	{name: "Erf/gelu-form-negative-scale", dtype: f32, ins: ins(normal, s(3, 4)), build: func(b *graph.Builder, x []string) string {
		a := b.Add(b.Erf(b.Div(x[0], b.Scalar(dtype.Float32, 1.7))), b.Scalar(dtype.Float32, 1))
		return b.Mul(b.Mul(x[0], a), b.Scalar(dtype.Float32, -0.4))
	}},
	{name: "Tanh/gelu-exported-tanh-form", dtype: f64, ins: ins(normal, s(3, 4)), build: func(b *graph.Builder, x []string) string {
		c := func(v float64) string { return b.Scalar(f64, v) }
		inner := b.Mul(c(0.7978845608028654), b.Add(x[0], b.Mul(c(0.044715), b.Pow(x[0], c(3)))))
		return b.Mul(b.Mul(c(0.5), x[0]), b.Add(c(1), b.Tanh(inner)))
	}},
	{name: "Gelu/none", dtype: f32, opset: 20, ins: ins(normal, s(2, 5)), build: op("Gelu")},
	{name: "Gelu/tanh", dtype: f32, opset: 20, ins: ins(normal, s(2, 5)), build: op("Gelu", graph.AString("approximate", "tanh"))},
	// ONNX Runtime's own, which autodiff.FuseGelus writes at opset 17.
	{name: "Gelu/com.microsoft", dtype: f32, ins: ins(normal, s(3, 5)), build: func(b *graph.Builder, x []string) string {
		b.G.Domains[graph.MSDomain] = 1
		y := b.G.Fresh("gelu_out")
		b.G.AddNode(&graph.Node{Op: "Gelu", Domain: graph.MSDomain, Name: b.G.Fresh("gelu"), Inputs: []string{x[0]}, Outputs: []string{y}})
		return y
	}},
	{name: "Softplus", dtype: f32, ins: ins(normal, s(2, 3)), build: op("Softplus")},
	{name: "Sin", dtype: f64, ins: ins(normal, s(2, 3)), build: op("Sin")},
	{name: "Cos", dtype: f64, ins: ins(normal, s(2, 3)), build: op("Cos")},
	{name: "Reciprocal", dtype: f64, ins: ins(positive, s(2, 3)), build: op("Reciprocal")},
	{name: "Expand", dtype: f64, ins: ins(normal, s(3, 1)), build: func(b *graph.Builder, x []string) string {
		return b.Op("Expand", []string{x[0], b.Ints(2, 3, 4)})
	}},
	{name: "Trilu/lower-k1", dtype: f64, ins: ins(normal, s(2, 3, 4)), build: func(b *graph.Builder, x []string) string {
		return b.Op("Trilu", []string{x[0], b.Const(graph.Int64s("", nil, []int64{1}))}, ai("upper", 0))
	}},
	{name: "Where/broadcast", dtype: f64, ins: ins(normal, s(2, 3, 4), s(4)), build: func(b *graph.Builder, x []string) string {
		c := boolConst(b, s(2, 1, 4), true, false, false, true, false, true, true, false)
		return b.Where(c, x[0], x[1])
	}},
	{name: "Where/attention-mask", dtype: f64, ins: ins(normal, s(2, 3, 3)), build: func(b *graph.Builder, x []string) string {
		causal := boolConst(b, s(3, 3), true, false, false, true, true, false, true, true, true)
		return b.Softmax(b.Where(causal, x[0], b.Scalar(f64, -1e9)), -1)
	}},
	// Attention's probabilities times V: the softmax gradient's row sums
	// taken from O and its gradient (softmaxRowDots); V broadcast over
	// the heads; P broadcast over V's batch, where they are not.
	{name: "Softmax/into-MatMul", dtype: f64, ins: ins(normal, s(2, 3, 4, 5), s(2, 3, 5, 2)), build: func(b *graph.Builder, x []string) string {
		return b.MatMul(b.Softmax(x[0], -1), x[1])
	}},
	{name: "Softmax/into-MatMul-V-broadcast", dtype: f64, ins: ins(normal, s(2, 3, 4, 5), s(2, 1, 5, 2)), build: func(b *graph.Builder, x []string) string {
		return b.MatMul(b.Softmax(x[0], -1), x[1])
	}},
	{name: "Softmax/into-MatMul-P-broadcast", dtype: f64, ins: ins(normal, s(1, 3, 4, 5), s(2, 3, 5, 2)), build: func(b *graph.Builder, x []string) string {
		return b.MatMul(b.Softmax(x[0], -1), x[1])
	}},
	{name: "Clip/consts", dtype: f64, ins: ins(away, s(3, 4)), build: func(b *graph.Builder, x []string) string {
		return b.Op("Clip", []string{x[0], b.Scalar(f64, -0.5), b.Scalar(f64, 0.6)})
	}},
	{name: "Clip/bounds-as-inputs", dtype: f64, ins: []in{{shape: s(3, 4), g: away}, {shape: s(), g: away}, {shape: s(), g: away}},
		build: func(b *graph.Builder, x []string) string {
			lo := b.Neg(b.Mul(b.Abs(x[1]), b.Scalar(f64, 0.5)))
			hi := b.Mul(b.Abs(x[2]), b.Scalar(f64, 0.5))
			return b.Op("Clip", []string{x[0], lo, hi})
		}},
	{name: "Clip/max-only", dtype: f64, ins: ins(away, s(5)), build: func(b *graph.Builder, x []string) string {
		return b.Op("Clip", []string{x[0], "", b.Scalar(f64, 0)})
	}},
	{name: "Max/broadcast-three", dtype: f64, ins: ins(normal, s(2, 3), s(3), s(2, 1)), build: op("Max")},
	{name: "Min/two", dtype: f64, ins: ins(normal, s(3, 4), s(3, 4)), build: op("Min")},
	{name: "ReduceMax/axis-keep", dtype: f64, ins: ins(distinct, s(2, 3, 4)), build: func(b *graph.Builder, x []string) string {
		return b.ReduceMax(x[0], true, 1)
	}},
	{name: "ReduceMax/all-drop", dtype: f64, ins: ins(distinct, s(3, 2)), build: func(b *graph.Builder, x []string) string {
		return b.ReduceMax(x[0], false)
	}},
	{name: "ReduceMin/last-drop", dtype: f64, ins: ins(distinct, s(2, 5)), build: func(b *graph.Builder, x []string) string {
		return b.ReduceMin(x[0], false, -1)
	}},
	{name: "Dropout/inference", dtype: f64, ins: ins(normal, s(2, 3)), build: op("Dropout")},
	{name: "Dropout/training-ratio0", dtype: f32, ins: ins(normal, s(2, 3)), build: func(b *graph.Builder, x []string) string {
		return b.Op("Dropout", []string{x[0], b.Scalar(f32, 0), boolConst(b, nil, true)})
	}},
	{name: "Einsum/attention-scores", dtype: f64, ins: ins(normal, s(2, 2, 3, 4), s(2, 2, 5, 4)), build: func(b *graph.Builder, x []string) string {
		return b.Einsum("bhqd,bhkd->bhqk", x...)
	}},
	{name: "Einsum/implicit", dtype: f64, ins: ins(normal, s(3, 4), s(4, 2)), build: func(b *graph.Builder, x []string) string {
		return b.Einsum("ij,jk", x...)
	}},
	{name: "Einsum/label-summed-alone", dtype: f64, ins: ins(normal, s(2, 3, 4), s(4)), build: func(b *graph.Builder, x []string) string {
		return b.Einsum("ijk,k->j", x...)
	}},
	{name: "Gather/embedding-repeats-negative", dtype: f64, ins: ins(normal, s(5, 3)), build: func(b *graph.Builder, x []string) string {
		return b.Gather(x[0], idx(b, s(2, 4), 0, 3, 3, 1, -1, 0, 2, 3), 0)
	}},
	{name: "Gather/axis1", dtype: f64, ins: ins(normal, s(2, 5, 3)), build: func(b *graph.Builder, x []string) string {
		return b.Gather(x[0], idx(b, s(3), 4, 1, 4), 1)
	}},
	{name: "Gather/scalar-index-last-axis", dtype: f64, ins: ins(normal, s(2, 3, 4)), build: func(b *graph.Builder, x []string) string {
		return b.Gather(x[0], idx(b, nil, 2), -1)
	}},
	{name: "Gather/argmin-codebook", dtype: f64, ins: []in{{shape: s(6, 2), g: distinct}, {shape: s(4, 3), g: normal}},
		build: func(b *graph.Builder, x []string) string {
			// Vector quantisation: nearest of 4 codes to each of 6 vectors;
			// only the codebook (x1) is differentiated through Gather.
			proj := b.MatMul(x[0], b.Const(graph.Float64s("", s(2, 3), []float64{1, 0.5, -0.3, 0.2, -1, 0.7})))
			d := b.ReduceSum(b.Mul(b.Sub(b.Unsqueeze(proj, 1), x[1]), b.Sub(b.Unsqueeze(proj, 1), x[1])), false, 2)
			return b.Gather(x[1], b.ArgMin(d, 1, false), 0)
		}},
	{name: "Slice/steps1-multi-axis", dtype: f64, ins: ins(normal, s(3, 5, 4)), build: func(b *graph.Builder, x []string) string {
		return b.Slice(x[0], s(1, -3), s(10, -1), s(1, 2), nil)
	}},
	{name: "Slice/step2-and-negative", dtype: f64, ins: ins(normal, s(2, 7, 5)), build: func(b *graph.Builder, x []string) string {
		return b.Slice(x[0], s(1, -1), s(7, 0), s(1, 2), s(2, -2))
	}},
	{name: "Slice/reverse", dtype: f64, ins: ins(normal, s(4, 3)), build: func(b *graph.Builder, x []string) string {
		return b.Slice(x[0], s(-1), s(-100), s(0), s(-1))
	}},
	{name: "Split/equal-one-unused", dtype: f64, ins: ins(normal, s(2, 6, 2)), build: func(b *graph.Builder, x []string) string {
		p := b.OpN("Split", []string{x[0]}, 3, ai("axis", 1))
		return b.Mul(p[0], p[2])
	}},
	{name: "Split/sizes", dtype: f64, ins: ins(normal, s(5, 3)), build: func(b *graph.Builder, x []string) string {
		p := b.OpN("Split", []string{x[0], b.Ints(2, 3)}, 2)
		return b.Concat(0, b.Exp(p[1]), p[0])
	}},
	{name: "Pad/constant", dtype: f64, ins: ins(normal, s(2, 3, 4)), build: func(b *graph.Builder, x []string) string {
		return b.Pad(x[0], s(0, 1, 2, 0, 0, 1))
	}},
	{name: "Pad/crop-and-pad", dtype: f64, ins: ins(normal, s(2, 5, 4)), build: func(b *graph.Builder, x []string) string {
		return b.Pad(x[0], s(0, -1, 1, 1, 2, -2))
	}},
	{name: "LayerNormalization/last", dtype: f64, ins: ins(normal, s(2, 3, 4), s(4), s(4)), build: func(b *graph.Builder, x []string) string {
		return b.LayerNorm(x[0], x[1], x[2], -1, 1e-5)
	}},
	{name: "LayerNormalization/axis1-no-bias", dtype: f64, ins: ins(normal, s(2, 3, 4), s(3, 4)), build: func(b *graph.Builder, x []string) string {
		return b.Op("LayerNormalization", x, ai("axis", 1), af("epsilon", 1e-3))
	}},
	{name: "InstanceNormalization/2d", dtype: f32, ins: ins(normal, s(2, 3, 4, 5), s(3), s(3)), build: op("InstanceNormalization")},
	{name: "InstanceNormalization/3d", dtype: f32, ins: ins(normal, s(2, 2, 3, 3, 2), s(2), s(2)), build: op("InstanceNormalization", af("epsilon", 1e-3))},
	{name: "InstanceNormalization/groupnorm-pattern-3d", dtype: f32, ins: ins(normal, s(2, 4, 2, 3, 2), s(4), s(4)), build: func(b *graph.Builder, x []string) string {
		return b.GroupNorm(x[0], x[1], x[2], 2, 1e-5)
	}},
	{name: "GroupNormalization/opset18-per-group-3d", dtype: f32, opset: 18, ins: ins(normal, s(2, 4, 2, 3, 2), s(2), s(2)), build: op("GroupNormalization", ai("num_groups", 2))},
	{name: "GroupNormalization/opset21-per-channel-3d", dtype: f32, opset: 21, ins: ins(normal, s(2, 6, 2, 2, 3), s(6), s(6)), build: op("GroupNormalization", ai("num_groups", 3))},
	{name: "GroupNormalization/opset21-2d", dtype: f32, opset: 21, ins: ins(normal, s(1, 4, 3, 3), s(4), s(4)), build: op("GroupNormalization", ai("num_groups", 2), af("epsilon", 1e-3))},
	{name: "ConvTranspose/1d-stride-outpad", dtype: f32, ins: ins(normal, s(2, 3, 4), s(3, 2, 3), s(2)), build: op("ConvTranspose", ais("strides", s(2)), ais("pads", s(1, 0)), ais("output_padding", s(1)))},
	{name: "ConvTranspose/2d-groups-dilation", dtype: f32, ins: ins(normal, s(1, 4, 3, 4), s(4, 3, 2, 3)), build: op("ConvTranspose", ai("group", 2), ais("dilations", s(2, 1)), ais("pads", s(1, 0, 0, 1)))},
	{name: "ConvTranspose/2d-upsample", dtype: f32, ins: ins(normal, s(2, 2, 3, 3), s(2, 3, 4, 4), s(3)), build: op("ConvTranspose", ais("strides", s(2, 2)), ais("pads", s(1, 1, 1, 1)))},
	{name: "ConvTranspose/3d-stride-outpad", dtype: f32, ins: ins(normal, s(1, 2, 2, 3, 2), s(2, 3, 3, 3, 3), s(3)), build: op("ConvTranspose", ais("strides", s(2, 2, 1)), ais("pads", s(1, 1, 1, 1, 1, 1)), ais("output_padding", s(1, 0, 0)))},
	{name: "ConvTranspose/3d-groups", dtype: f32, ins: ins(normal, s(2, 4, 2, 2, 2), s(4, 1, 2, 2, 2)), build: op("ConvTranspose", ai("group", 2), ais("strides", s(2, 2, 2)))},
	{name: "Resize/nearest-3d-pytorch", dtype: f32, ins: ins(normal, s(1, 2, 2, 3, 2)), build: resize(nil, fs(1, 1, 2, 2, 2), "nearest", "asymmetric", "floor")},
	{name: "Resize/linear-3d-trilinear", dtype: f32, ins: ins(normal, s(1, 2, 2, 3, 3)), build: resize(nil, fs(1, 1, 2, 2, 2), "linear", "pytorch_half_pixel", "")},
	{name: "Resize/linear-2d-align-corners", dtype: f32, ins: ins(normal, s(2, 1, 3, 4)), build: resize(s(2, 1, 5, 7), nil, "linear", "align_corners", "")},
	{name: "Resize/linear-2d-downsample", dtype: f32, ins: ins(normal, s(1, 2, 6, 4)), build: resize(nil, fs(1, 1, 0.5, 0.5), "linear", "half_pixel", "")},
	{name: "Resize/linear-2d-downsample-0.6", dtype: f32, ins: ins(normal, s(1, 1, 10, 5)), build: resize(nil, fs(1, 1, 0.6, 0.6), "linear", "half_pixel", "")},
	{name: "Resize/linear-2d-downsample-pytorch", dtype: f32, ins: ins(normal, s(1, 2, 6, 4)), build: resize(nil, fs(1, 1, 0.5, 0.5), "linear", "pytorch_half_pixel", "")},
	{name: "Resize/linear-2d-downsample-asymmetric", dtype: f32, ins: ins(normal, s(1, 2, 6, 4)), build: resize(nil, fs(1, 1, 0.5, 0.5), "linear", "asymmetric", "")},
	{name: "Resize/linear-2d-downsample-sizes", dtype: f32, ins: ins(normal, s(1, 1, 7, 6)), build: resize(s(1, 1, 3, 4), nil, "linear", "half_pixel", "")},
	{name: "Resize/linear-3d-downsample", dtype: f32, ins: ins(normal, s(1, 1, 4, 6, 4)), build: resize(nil, fs(1, 1, 0.5, 0.5, 0.5), "linear", "pytorch_half_pixel", "")},
	{name: "Resize/linear-2d-downsample-align", dtype: f32, ins: ins(normal, s(1, 1, 7, 5)), build: resize(s(1, 1, 4, 3), nil, "linear", "align_corners", "")},
	{name: "Resize/nearest-2d-sizes-round", dtype: f32, ins: ins(normal, s(1, 1, 5, 3)), build: resize(s(1, 1, 7, 8), nil, "nearest", "half_pixel", "round_prefer_floor")},
	{name: "Resize/nearest-1d-ceil", dtype: f32, ins: ins(normal, s(2, 2, 4)), build: resize(nil, fs(1, 1, 2.5), "nearest", "tf_half_pixel_for_nn", "ceil")},
}

func resize(sizes []int64, scales []float64, mode, ctm, nearest string) func(b *graph.Builder, x []string) string {
	return func(b *graph.Builder, x []string) string {
		attrs := []*graph.Attr{graph.AString("mode", mode), graph.AString("coordinate_transformation_mode", ctm)}
		if nearest != "" {
			attrs = append(attrs, graph.AString("nearest_mode", nearest))
		}
		if sizes != nil {
			return b.Op("Resize", []string{x[0], "", "", b.Ints(sizes...)}, attrs...)
		}
		f := make([]float32, len(scales))
		for i, v := range scales {
			f[i] = float32(v)
		}
		return b.Op("Resize", []string{x[0], "", b.Const(graph.Float32s("", []int64{int64(len(f))}, f))}, attrs...)
	}
}

func fs(v ...float64) []float64 { return v }
