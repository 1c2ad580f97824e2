package autodiff_test

import (
	"strings"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// TestSoftmaxRowDotsFromOutput: the gradient of attention's softmax takes
// its row sums from O = P·V and O's gradient, [B, H, L, d], not from the
// [B, H, L, L] product of P and its gradient, and subtracts them inside
// one product, [dO | D]·[V | -1]ᵀ, with no element-wise pass over the
// scores; with the batch unknown too, where P's and V's batch trace to
// the one input. A softmax read by something else as well keeps the
// product and the subtraction.
func TestSoftmaxRowDotsFromOutput(t *testing.T) {
	type backward struct {
		sums             map[int64]int // ReduceSums by their input's last size
		scoreOps, folded int           // Subs and Adds over P's shape; products of [dO | D]
	}
	build := func(extraReader bool) backward {
		g := graph.New("attn", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{-1, 16, 8}})
		g.Dims["x"] = []string{"batch", "", ""}
		b := graph.NewBuilder(g, "fwd/")
		heads := func(w string) string {
			return b.Transpose(b.Reshape(b.MatMul("x", w), b.Ints(0, 16, 2, 4)), 0, 2, 1, 3) // [B, 2, 16, 4]
		}
		param := func(name string) string {
			g.AddInput(name, graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{8, 8}})
			return name
		}
		q, k, v := heads(param("wq")), heads(param("wk")), heads(param("wv"))
		p := b.Softmax(b.MatMul(q, b.Transpose(k, 0, 1, 3, 2)), -1) // [B, 2, 16, 16]
		loss := b.ReduceSum(b.MatMul(p, v), false)
		if extraReader {
			loss = b.Add(loss, b.ReduceSum(p, false))
		}
		g.FoldShapes()
		grads, err := autodiff.GradientsWith(g, loss, []string{"wq", "wk", "wv"}, "grad/", autodiff.Options{})
		if err != nil {
			t.Fatal(err)
		}
		g.Outputs = []string{grads["wq"], grads["wk"], grads["wv"]}
		g.Prune() // the product rule's dP, which nothing reads
		bw := backward{sums: map[int64]int{}}
		prod := g.Producers()
		for _, n := range g.Nodes {
			if !strings.HasPrefix(n.Name, "grad/") {
				continue
			}
			in, out := g.Info(n.Input(0)), g.Info(n.Outputs[0])
			switch {
			case n.Op == "ReduceSum" && in.Rank() == 4:
				bw.sums[in.Shape[3]]++
			case (n.Op == "Sub" || n.Op == "Add") && out.Rank() == 4 && out.Shape[3] == 16:
				bw.scoreOps++
			case n.Op == "MatMul" && prod[n.Input(0)] != nil && prod[n.Input(0)].Op == "Concat" && out.Shape[3] == 16:
				bw.folded++
			}
		}
		return bw
	}
	if bw := build(false); bw.sums[4] != 1 || bw.sums[16] != 0 || bw.scoreOps != 0 || bw.folded != 1 {
		t.Errorf("attention's softmax: row sums over inputs of last size %v, %d element-wise ops over the scores, %d products [dO | D]·[V | -1]ᵀ; "+
			"want one sum over O's 4, none over P's 16, no element-wise op, one product", bw.sums, bw.scoreOps, bw.folded)
	}
	if bw := build(true); bw.sums[16] != 1 || bw.scoreOps != 1 || bw.folded != 0 {
		t.Errorf("softmax read twice: row sums over inputs of last size %v, %d element-wise ops over the scores, %d products; want the product's sum, over 16, its Sub, no product",
			bw.sums, bw.scoreOps, bw.folded)
	}
}

// TestSoftmaxRowDotsTyped: with the product in bfloat16, as a GPU build's
// autocast writes it (P float32, rounded for the MatMul; O bfloat16), the
// row sums are formed in float32 and every element-wise node of the
// backward reads operands of one type (ONNX Runtime refuses mixed ones).
func TestSoftmaxRowDotsTyped(t *testing.T) {
	g := graph.New("attn", graph.EmitOpset)
	g.AddInput("s", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 3, 4, 5}})
	g.AddInput("v", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 3, 5, 2}})
	b := graph.NewBuilder(g, "fwd/")
	p := b.Softmax("s", -1)
	o := b.MatMul(b.Cast(p, dtype.BFloat16), b.Cast("v", dtype.BFloat16))
	loss := b.ReduceSum(b.Cast(o, dtype.Float32), false)
	if _, err := autodiff.GradientsWith(g, loss, []string{"s", "v"}, "grad/", autodiff.Options{}); err != nil {
		t.Fatal(err)
	}
	dots := false
	for _, n := range g.Nodes {
		switch n.Op {
		case "Add", "Sub", "Mul", "Div", "MatMul", "Concat":
			if a, c := g.Info(n.Inputs[0]).DType, g.Info(n.Inputs[1]).DType; a != c {
				t.Errorf("%s reads %v and %v", n.Describe(), a, c)
			}
		case "ReduceSum":
			if in := g.Info(n.Inputs[0]); in.Rank() == 4 && in.Shape[3] == 2 {
				dots = true
				if in.DType != dtype.Float32 {
					t.Errorf("row sums over O formed in %v, want float32", in.DType)
				}
			}
		}
	}
	if !dots {
		t.Error("the softmax's row sums were not taken from O")
	}
}
