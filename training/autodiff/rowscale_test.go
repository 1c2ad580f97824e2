package autodiff

import (
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/graph"
)

// TestRowScaleThroughGemm: the gradient of Σ w·logsumexp(h·Wᵀ) reads the
// softmax straight into both Gemms, the weights scaling their narrow
// operand and result, and the softmax's row dimension is named (its
// input's once NameSoftmaxInputs runs).
func TestRowScaleThroughGemm(t *testing.T) {
	build := func() *graph.Graph {
		g := graph.New("t", graph.EmitOpset)
		g.AddInput("h", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4}})
		g.AddInput("w", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1}})
		g.AddInitializer(graph.Float32s("W", []int64{6, 4}, make([]float32, 24)))
		b := graph.NewBuilder(g, "")
		lse := b.ReduceLogSumExp(b.Op("Gemm", []string{"h", "W"}, graph.AInt("transB", 1)), false, 1)
		loss := b.ReduceSum(b.Mul(lse, "w"), false)
		g.Outputs = []string{loss}
		if _, err := Gradients(g, loss, []string{"h", "W"}, "grad/"); err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := build()
	var softmax *graph.Node
	for _, n := range g.Nodes {
		if n.Op == "Softmax" {
			softmax = n
		}
	}
	if softmax == nil {
		t.Fatal("no Softmax in the backward")
	}
	gemms := 0
	for _, n := range g.Consumers()[softmax.Outputs[0]] {
		if n.Op != "Gemm" {
			t.Errorf("the softmax feeds %s, want only Gemms", n.Describe())
		}
		gemms++
	}
	if gemms != 2 {
		t.Errorf("the softmax feeds %d Gemms, want 2 (dh and dW)", gemms)
	}
	if d := g.Dims[softmax.Outputs[0]]; len(d) != 2 || d[0] == "" {
		t.Errorf("softmax dims %q: want its rows named", d)
	}
	NameSoftmaxInputs(g)
	if a, b := g.Dims[softmax.Inputs[0]], g.Dims[softmax.Outputs[0]]; len(a) != 2 || a[0] != b[0] {
		t.Errorf("softmax input dims %q, output %q: want the same names", a, b)
	}
	if err := g.Sort(); err != nil {
		t.Fatalf("the rewritten graph is not topological: %v", err)
	}
}
