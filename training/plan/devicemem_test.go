package plan

import (
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// TestDeviceTyped: an emulated float16 product, as a CPU build writes it
// (rounding Casts around a float32 MatMul), replayed as a GPU with the
// kernel runs it: the rounding pairs are gone, the product's output is
// float16, and the float32 copy that Softmax (a float32 op) reads stays
// float32. In bfloat16 a Conv, which ONNX Runtime's CUDA provider lacks,
// keeps its rounding Casts and float32 output.
func TestDeviceTyped(t *testing.T) {
	build := func(op string, low dtype.DType, shape, wshape []int64) *graph.Graph {
		g := graph.New("emulated", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: shape})
		g.AddInput("w", graph.Info{DType: dtype.Float32, Known: true, Shape: wshape})
		b := graph.NewBuilder(g, "")
		round := func(v string) string {
			return b.Op("Cast", []string{b.Op("Cast", []string{v}, graph.AInt("to", int64(low)))}, graph.AInt("to", int64(dtype.Float32)))
		}
		y := b.Op(op, []string{round("x"), round("w")})
		y16 := b.Op("Cast", []string{y}, graph.AInt("to", int64(low)))
		b.OpInto("z", "Softmax", []string{b.Op("Cast", []string{y16}, graph.AInt("to", int64(dtype.Float32)))})
		g.Outputs = []string{"z"}
		return g
	}
	g := build("MatMul", dtype.Float16, []int64{4, 8}, []int64{8, 8})
	deviceTyped(dtype.Float16, map[string]bool{"x": true})(g)
	ops := map[string]int{}
	var product, copy32 string
	for _, n := range g.Nodes {
		ops[n.Op]++
		switch {
		case n.Op == "MatMul":
			product = n.Outputs[0]
		case n.Op == "Softmax":
			copy32 = n.Inputs[0]
		}
	}
	if ops["Cast"] != 3 || ops["MatMul"] != 1 || ops["Softmax"] != 1 {
		t.Errorf("float16 MatMul as the GPU runs it: %v; want 3 Casts (x and w to float16, the product to float32), MatMul, Softmax", ops)
	}
	if g.Info(product).DType != dtype.Float16 || g.Info(copy32).DType != dtype.Float32 {
		t.Errorf("product %v, Softmax's input %v; want float16 and float32", g.Info(product).DType, g.Info(copy32).DType)
	}

	g = build("Conv", dtype.BFloat16, []int64{1, 2, 5, 5}, []int64{3, 2, 3, 3})
	deviceTyped(dtype.BFloat16, map[string]bool{"x": true})(g)
	ops = map[string]int{}
	for _, n := range g.Nodes {
		ops[n.Op]++
		if n.Op == "Conv" && g.Info(n.Outputs[0]).DType != dtype.Float32 {
			t.Errorf("bfloat16 Conv's output %v; want float32", g.Info(n.Outputs[0]).DType)
		}
	}
	if ops["Cast"] != 6 {
		t.Errorf("bfloat16 Conv as the GPU runs it: %v; want its 6 Casts kept", ops)
	}
}
