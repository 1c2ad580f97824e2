// Package nn is the layer vocabulary ortrain's model recipes are written in:
// parameters created with PyTorch's initialisations under state_dict-style
// names, and the layers (convolution, normalisation, linear, embedding,
// activations, attention pieces) emitted as standard ONNX ops through a
// graph.Builder.
//
// Two rules from artifacts.Build shape the code: every floating initializer
// of rank >= 1 becomes a trained parameter, so fixed tensors (attention
// masks, position tables) are Constant nodes instead; and gradient rules
// want static channel and spatial sizes, so layers record the shape facts of
// ops graph inference does not know yet (Resize, the StopGradient marker).
package nn

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort/onnxpb"
	"github.com/ortrain/ortrain/training/graph"
)

// Opset is the ai.onnx opset recipes emit: the lowest ortrain writes, which
// has LayerNormalization (17) but not GroupNormalization (18).
const Opset = graph.EmitOpset

// StopGradientDomain and StopGradientOp name ortrain's stop-gradient marker,
// as models/pytorch/ortrain_export.py exports it: Identity forward, no
// gradient backward.
const (
	StopGradientDomain = "ortrain"
	StopGradientOp     = "StopGradient"
)

// Net builds one model graph: the graph, a builder over it, and the random
// source that draws initial weights (seeded, so a recipe is reproducible).
type Net struct {
	G *graph.Graph
	B *graph.Builder
	R *rand.Rand
}

// New starts an empty graph named name whose weights are drawn from seed.
func New(name string, seed uint64) *Net {
	g := graph.New(name, Opset)
	return &Net{G: g, B: graph.NewBuilder(g, ""), R: rand.New(rand.NewPCG(seed, 0x6f72747261696e))}
}

// Input declares a graph input; dims names the symbolic dimensions ("" for
// static ones), -1 in shape marks them.
func (n *Net) Input(name string, dt dtype.DType, shape []int64, dims []string) string {
	n.G.AddInput(name, graph.Info{DType: dt, Known: true, Shape: shape})
	n.G.Dims[name] = dims
	return name
}

// Init draws one initial value of a weight tensor from its fan-in and
// fan-out (as PyTorch computes them: channels times kernel volume).
type Init func(r *rand.Rand, fanIn, fanOut int64) float64

// KaimingNormalFanOut is kaiming_normal_(mode="fan_out", nonlinearity="relu"),
// torchvision's ResNet convolution init: N(0, 2/fan_out).
func KaimingNormalFanOut(r *rand.Rand, _, fanOut int64) float64 {
	return r.NormFloat64() * math.Sqrt(2/float64(fanOut))
}

// TorchDefault is PyTorch's default for Linear and Conv weights and biases
// (kaiming_uniform_ with a=sqrt(5), which reduces to): U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)).
func TorchDefault(r *rand.Rand, fanIn, _ int64) float64 {
	b := 1 / math.Sqrt(float64(fanIn))
	return (2*r.Float64() - 1) * b
}

// Normal returns the N(0, std²) init (GPT-2 style transformers use 0.02).
func Normal(std float64) Init {
	return func(r *rand.Rand, _, _ int64) float64 { return r.NormFloat64() * std }
}

// Uniform returns the U(-bound, bound) init.
func Uniform(bound float64) Init {
	return func(r *rand.Rand, _, _ int64) float64 { return (2*r.Float64() - 1) * bound }
}

// Fill returns the init that sets every element to v (norm weights 1,
// biases 0).
func Fill(v float64) Init {
	return func(*rand.Rand, int64, int64) float64 { return v }
}

// Param adds a float32 initializer named name (a state_dict key) drawn from
// init with the given fans, and returns its name.
func (n *Net) Param(name string, shape []int64, fanIn, fanOut int64, init Init) string {
	v := make([]float32, dtype.Numel(shape))
	for i := range v {
		v[i] = float32(init(n.R, fanIn, fanOut))
	}
	n.G.AddInitializer(graph.Float32s(name, shape, v))
	return name
}

// Constant emits a Constant node holding t. Unlike an initializer it is not
// turned into a trained parameter by artifacts.Build.
func (n *Net) Constant(t *onnxpb.TensorProto) string {
	out := n.G.Fresh("const")
	n.G.AddNode(&graph.Node{Op: "Constant", Outputs: []string{out}, Attrs: []*graph.Attr{graph.ATensor("value", t)}})
	return out
}

// spatial returns the spatial rank of x ([N, C, spatial...]).
func (n *Net) spatial(x string) int {
	r := n.B.Info(x).Rank()
	if r < 3 {
		n.B.Fail("nn: %s has rank %d, want [N, C, spatial...]", x, r)
		return 0
	}
	return r - 2
}

func repeat(v int64, k int) []int64 {
	s := make([]int64, k)
	for i := range s {
		s[i] = v
	}
	return s
}

// Conv is a PyTorch ConvNd (1, 2 or 3 spatial axes, taken from x's rank)
// named name: weight [cout, cin, k...] (name.weight) and, with bias,
// name.bias; symmetric padding pad on every side.
func (n *Net) Conv(name, x string, cin, cout, k, stride, pad int64, bias bool, init Init) string {
	d := n.spatial(x)
	if n.B.Err != nil {
		return ""
	}
	kvol := int64(math.Pow(float64(k), float64(d)))
	shape := append([]int64{cout, cin}, repeat(k, d)...)
	in := []string{x, n.Param(name+".weight", shape, cin*kvol, cout*kvol, init)}
	if bias {
		in = append(in, n.Param(name+".bias", []int64{cout}, cin*kvol, cout*kvol, TorchDefault))
	}
	return n.B.Op("Conv", in, graph.AInts("kernel_shape", repeat(k, d)), graph.AInts("strides", repeat(stride, d)),
		graph.AInts("pads", repeat(pad, 2*d)))
}

// BatchNorm is a PyTorch BatchNormNd named name (weight 1, bias 0,
// running_mean 0, running_var 1; eps 1e-5, PyTorch momentum 0.1 which ONNX
// writes as 0.9). artifacts.Build runs it in training mode and treats the
// running statistics as buffers.
func (n *Net) BatchNorm(name, x string, c int64, zeroWeight bool) string {
	w := 1.0
	if zeroWeight {
		w = 0
	}
	in := []string{x,
		n.Param(name+".weight", []int64{c}, c, c, Fill(w)),
		n.Param(name+".bias", []int64{c}, c, c, Fill(0)),
		n.Param(name+".running_mean", []int64{c}, c, c, Fill(0)),
		n.Param(name+".running_var", []int64{c}, c, c, Fill(1)),
	}
	return n.B.Op("BatchNormalization", in, graph.AFloat("epsilon", 1e-5), graph.AFloat("momentum", 0.9))
}

// GroupNorm is PyTorch's GroupNorm(groups, c, eps=1e-6 as taming's
// VQ-GAN uses) named name, written as elementary ops over [N, groups, -1]
// (opset 17 has no GroupNormalization, and the elementary form is
// differentiable with the rules ortrain has). The result keeps x's static
// shape.
func (n *Net) GroupNorm(name, x string, c, groups int64) string {
	b := n.B
	if c%groups != 0 {
		return b.Fail("nn: GroupNorm %s: %d channels do not split into %d groups", name, c, groups)
	}
	info := b.Info(x)
	xr := b.Reshape(x, b.Ints(0, groups, -1))
	mean := b.ReduceMean(xr, true, 2)
	d := b.Sub(xr, mean)
	v := b.ReduceMean(b.Mul(d, d), true, 2)
	y := b.Div(d, b.Sqrt(b.Add(v, b.Scalar(dtype.Float32, 1e-6))))
	if info.Known && !slices.Contains(info.Shape[1:], -1) {
		y = b.Reshape(y, b.Ints(append([]int64{0}, info.Shape[1:]...)...))
	} else {
		y = b.ReshapeLike(y, x)
	}
	bshape := append([]int64{c}, repeat(1, info.Rank()-2)...)
	w := n.Param(name+".weight", []int64{c}, c, c, Fill(1))
	bb := n.Param(name+".bias", []int64{c}, c, c, Fill(0))
	return b.Add(b.Mul(y, b.Reshape(w, b.Ints(bshape...))), b.Reshape(bb, b.Ints(bshape...)))
}

// LayerNorm is PyTorch's LayerNorm(d) over the last axis named name (eps
// 1e-5), as ONNX LayerNormalization.
func (n *Net) LayerNorm(name, x string, d int64) string {
	w := n.Param(name+".weight", []int64{d}, d, d, Fill(1))
	bb := n.Param(name+".bias", []int64{d}, d, d, Fill(0))
	return n.B.Op("LayerNormalization", []string{x, w, bb}, graph.AInt("axis", -1), graph.AFloat("epsilon", 1e-5))
}

// Linear is PyTorch's Linear(in, out) named name: weight [out, in] as
// PyTorch stores it, applied as x·weightᵀ (+ bias) over the last axis of x
// of any rank. A nil init is PyTorch's default for weight and bias; with
// another init the bias starts at zero, as GPT-2 style models set it.
func (n *Net) Linear(name, x string, in, out int64, bias bool, init Init) string {
	binit := Fill(0)
	if init == nil {
		init, binit = TorchDefault, TorchDefault
	}
	w := n.Param(name+".weight", []int64{out, in}, in, out, init)
	y := n.B.MatMul(x, n.B.Transpose(w, 1, 0))
	if bias {
		y = n.B.Add(y, n.Param(name+".bias", []int64{out}, in, out, binit))
	}
	return y
}

// SiLU is x·sigmoid(x).
func (n *Net) SiLU(x string) string { return n.B.Mul(x, n.B.Sigmoid(x)) }

// GELU is the exact GELU, 0.5·x·(1 + erf(x/√2)) (PyTorch's default; opset 17
// has no Gelu op).
func (n *Net) GELU(x string) string {
	b := n.B
	e := b.Op("Erf", []string{b.Mul(x, b.ScalarLike(x, 1/math.Sqrt2))})
	return b.Mul(b.Mul(x, b.ScalarLike(x, 0.5)), b.Add(e, b.ScalarLike(x, 1)))
}

// Upsample2x is nearest-neighbour upsampling by 2 on every spatial axis
// (F.interpolate(scale_factor=2, mode="nearest")), as ONNX Resize.
func (n *Net) Upsample2x(x string) string {
	b := n.B
	info := b.Info(x)
	d := n.spatial(x)
	if b.Err != nil {
		return ""
	}
	scales := append([]float32{1, 1}, make([]float32, d)...)
	for i := 2; i < len(scales); i++ {
		scales[i] = 2
	}
	sc := n.Constant(graph.Float32s("", []int64{int64(len(scales))}, scales))
	y := b.Op("Resize", []string{x, "", sc}, graph.AString("mode", "nearest"),
		graph.AString("coordinate_transformation_mode", "asymmetric"), graph.AString("nearest_mode", "floor"))
	// Graph inference does not know Resize; record what it produces.
	s := slices.Clone(info.Shape)
	for i := 2; i < len(s); i++ {
		if s[i] > 0 {
			s[i] *= 2
		}
	}
	n.G.Infos[y] = graph.Info{DType: info.DType, Known: info.Known, Shape: s}
	return y
}

// StopGradient emits ortrain's stop-gradient marker (Identity forward,
// no gradient) the way the PyTorch exporter does, with the opset import for
// its domain, and records that its output is shaped like x.
func (n *Net) StopGradient(x string) string {
	if n.B.Err != nil {
		return ""
	}
	out := n.G.Fresh("stop_gradient")
	n.G.Domains[StopGradientDomain] = 1
	n.G.AddNode(&graph.Node{Op: StopGradientOp, Domain: StopGradientDomain, Inputs: []string{x}, Outputs: []string{out}})
	n.G.Infos[out] = n.G.Infos[x]
	return out
}
