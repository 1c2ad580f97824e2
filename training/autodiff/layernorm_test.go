package autodiff_test

import (
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// float32 LayerNormalization takes its statistics from one
// LayerNormalization node in the backward (layerNormStats); the float64
// cases in rules_more_test.go keep the elementary ones.
var layerNormCases = []fdCase{
	{name: "LayerNormalization/f32-last", dtype: f32, ins: ins(normal, s(2, 3, 4), s(4), s(4)), build: func(b *graph.Builder, x []string) string {
		return b.LayerNorm(x[0], x[1], x[2], -1, 1e-5)
	}},
	{name: "LayerNormalization/f32-axis1-no-bias", dtype: f32, ins: ins(normal, s(2, 3, 4), s(3, 4)), build: func(b *graph.Builder, x []string) string {
		return b.Op("LayerNormalization", x, ai("axis", 1), af("epsilon", 1e-3))
	}},
}

func init() { ruleCases = append(ruleCases, layerNormCases...) }

// TestLayerNormStatsNodes checks that a float32 LayerNormalization's
// backward reads x̂ and 1/σ from one LayerNormalization node: no Sqrt, and
// 2 ReduceMeans (those of the input gradient) instead of 4.
func TestLayerNormStatsNodes(t *testing.T) {
	g := graph.New("ln", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 5, 8}})
	g.AddInput("w", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{8}})
	g.AddInput("c", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{8}})
	b := graph.NewBuilder(g, "fwd/")
	y := b.LayerNorm("x", "w", "c", -1, 1e-5)
	loss := b.ReduceSum(b.Mul(y, y), false)
	first := len(g.Nodes)
	if _, err := autodiff.Gradients(g, loss, []string{"x", "w", "c"}, "grad/"); err != nil {
		t.Fatal(err)
	}
	ops := map[string]int{}
	for _, n := range g.Nodes[first:] {
		ops[n.Op]++
	}
	if ops["LayerNormalization"] != 1 || ops["ReduceMean"] != 2 || ops["Sqrt"] != 0 {
		t.Errorf("backward %v; want 1 LayerNormalization, 2 ReduceMean, no Sqrt", ops)
	}
}
