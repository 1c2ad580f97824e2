package plan

import (
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// TestScalesFoldIntoMatMul: a Mul or Div by a constant scalar of a
// MatMul's product read by it alone, or of an operand only the MatMul
// reads, is priced as ONNX Runtime runs it after MatMulScaleFusion: no
// kernel; a scale of a product something else reads too, and a scale by a
// tensor, are kernels.
func TestScalesFoldIntoMatMul(t *testing.T) {
	g := graph.New("scales", graph.EmitOpset)
	for _, in := range []string{"q", "k"} {
		g.AddInput(in, graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{64, 64}})
	}
	b := graph.NewBuilder(g, "")
	half := b.Scalar(dtype.Float32, 0.5)
	after := b.Mul(b.MatMul("q", "k"), half)                                        // folded
	before := b.MatMul(b.Op("Div", []string{"q", b.Scalar(dtype.Float32, 8)}), "k") // folded
	shared := b.MatMul("q", "k")
	kept := b.Add(b.Mul(shared, half), shared) // read twice: a kernel
	byTensor := b.Mul(b.MatMul("q", "k"), "k") // not a scalar: a kernel
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	g.Outputs = []string{after, before, kept, byTensor}
	gpu, err := LookupGPU("h200")
	if err != nil {
		t.Fatal(err)
	}
	kernels := map[string]int{}
	for _, c := range costGraph(g, gpu, StepOptions{}) {
		if c.where != elided {
			kernels[c.op]++
		}
	}
	if kernels["Mul"] != 2 || kernels["Div"] != 0 || kernels["MatMul"] != 4 {
		t.Errorf("kernels %v; want 4 MatMul, 2 Mul (the shared product's and the tensor's scale), no Div", kernels)
	}
}
