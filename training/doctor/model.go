package doctor

import (
	"math/rand/v2"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// The model's sizes: a batch of 2 images of 3×8×8, 4 feature channels, a
// 5×4 table scattered into and 3 outputs per row.
const (
	batch, channels, side = 2, 3, 8
	features, rows, outs  = 4, 5, 3
	// emaBuffer is the buffer updated like the VQ-GAN's EMA code counts.
	emaBuffer = "ema.count"
	// prediction is the output the mean-squared-error loss reads.
	prediction = "y"
	seed       = 30
)

// Model is the forward graph the training check builds its artifacts
// from: the ops the presets' training graphs are made of, and which a
// device route has been seen to break, each in the form the recipes use.
//
//	x[2,3,8,8] → Conv(3×3, pad 1) → Relu → Slice(constant starts, ends,
//	axes: the inner 6×6) → ReduceMean over H, W → f[2,4]
//	z = ScatterElements(table[5,4], constant indices with repeats, f,
//	reduction add) → y = z · proj[4,3]: the loss is MSE(y, target)
//
// and, not trained through, the VQ-GAN's EMA code statistics: ArgMax of f
// per sample, ScatterElements(add) of ones into per-code counts,
// normalised by a ReduceSum, blended into the buffer ema.count.
//
// Its gradients add ConvTranspose-style Conv gradients, Slice's and
// ReduceMean's backward, GatherElements (the scatter's), MatMul and
// Relu's; the optimizer graph adds the SGD update with momentum, weight
// decay and clipping by the global norm.
func Model() *graph.Graph {
	r := rand.New(rand.NewPCG(seed, 1))
	g := graph.New("doctor", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{batch, channels, side, side}})
	g.AddInitializer(graph.Float32s("conv.weight", []int64{features, channels, 3, 3}, randn(r, features*channels*9, 0.3)))
	g.AddInitializer(graph.Float32s("conv.bias", []int64{features}, randn(r, features, 0.1)))
	g.AddInitializer(graph.Float32s("table.weight", []int64{rows, features}, randn(r, rows*features, 0.5)))
	g.AddInitializer(graph.Float32s("proj.weight", []int64{features, outs}, randn(r, features*outs, 0.5)))
	g.AddInitializer(graph.Float32s(emaBuffer, []int64{features}, make([]float32, features)))
	b := graph.NewBuilder(g, "")
	h := b.Relu(b.Op("Conv", []string{"x", "conv.weight", "conv.bias"}, graph.AInts("pads", []int64{1, 1, 1, 1})))
	s := b.Slice(h, []int64{1, 1}, []int64{side - 1, side - 1}, []int64{2, 3}, nil)
	f := b.ReduceMean(s, false, 2, 3)
	// Column 0 lands twice on row 0, column 2 twice on row 4: add must sum.
	idx := b.Const(graph.Int64s("", []int64{batch, features}, []int64{0, 2, 4, 1, 0, 3, 4, 2}))
	z := b.Op("ScatterElements", []string{"table.weight", idx, f}, graph.AInt("axis", 0), graph.AString("reduction", "add"))
	b.OpInto(prediction, "MatMul", []string{z, "proj.weight"})

	code := b.Op("ArgMax", []string{b.StopGradient(f)}, graph.AInt("axis", 1), graph.AInt("keepdims", 0))
	// Constant nodes, as the recipes make them: a floating initializer
	// would become a trained parameter.
	zeros := b.Op("Constant", nil, graph.ATensor("value", graph.Float32s("", []int64{features}, make([]float32, features))))
	ones := b.Op("Constant", nil, graph.ATensor("value", graph.Float32s("", []int64{batch}, []float32{1, 1})))
	counts := b.Op("ScatterElements", []string{zeros, code, ones}, graph.AInt("axis", 0), graph.AString("reduction", "add"))
	share := b.Div(counts, b.ReduceSum(counts, true, 0))
	ema := b.Add(b.Mul(emaBuffer, b.Scalar(dtype.Float32, 0.9)), b.Mul(share, b.Scalar(dtype.Float32, 0.1)))
	g.Outputs = []string{prediction, b.UpdateBuffer(emaBuffer, ema)}
	if b.Err != nil {
		panic(b.Err) // a fixed graph: an error here is a bug in this file
	}
	return g
}

func randn(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}
