package precision

import (
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// TestExactLowProducts: a weight gradient's GEMM over a window (Pad,
// Slice, Reshape) of a convolution's float32 copy of its low input, and
// over the float32 copy of a low output gradient, reads those moves written
// again over the low values and runs low, its output cast back to float32
// under its old name; the convolution keeps its float32 copy. A GEMM with
// an operand the low type may not hold (a float32 sum) stays as it was,
// over the float32 window, and so does everything without the low kernel.
func TestExactLowProducts(t *testing.T) {
	build := func() (*graph.Graph, string, string) {
		g := graph.New("t", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: dtype.BFloat16, Known: true, Shape: []int64{1, 2, 6, 6}})
		g.AddInput("w", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 2, 3, 3}})
		g.AddInput("dy", graph.Info{DType: dtype.BFloat16, Known: true, Shape: []int64{8, 6}})
		b := graph.NewBuilder(g, "")
		x32 := b.Cast("x", dtype.Float32)
		conv := b.Op("Conv", []string{x32, b.Cast(b.Cast("w", dtype.BFloat16), dtype.Float32)})
		padded := b.Op("Pad", []string{x32, b.Ints(0, 0, 1, 1, 0, 0, 1, 1), b.Scalar(dtype.Float32, 0)})
		window := b.Reshape(b.Slice(padded, []int64{2}, []int64{0}, []int64{6}, nil), b.Ints(-1, 8))
		dy32 := b.Cast("dy", dtype.Float32)
		exact := b.MatMul(b.Transpose(dy32, 1, 0), b.Reshape(window, b.Ints(8, -1)))
		inexact := b.MatMul(b.Transpose(b.Add(dy32, dy32), 1, 0), b.Reshape(window, b.Ints(8, -1)))
		if b.Err != nil {
			t.Fatal(b.Err)
		}
		g.Outputs = []string{conv, b.Reshape(exact, b.Ints(-1)), b.Reshape(inexact, b.Ints(-1))}
		return g, exact, inexact
	}
	all := func(n *graph.Node, dt dtype.DType) bool { return n.Op != "Conv" || dt == dtype.Float32 }
	g, exact, inexact := build()
	if n := ExactLowProducts(g, dtype.BFloat16, all); n != 1 {
		t.Fatalf("%d products given the low type, want 1", n)
	}
	g.Prune()
	if err := g.Sort(); err != nil {
		t.Fatalf("the rewritten graph is out of order: %v", err)
	}
	producers := g.Producers()
	up := producers[exact]
	if up == nil || !IsCast(up, dtype.Float32) {
		t.Fatalf("%s is made by %v, want a Cast to float32 of the low product", exact, up)
	}
	p := producers[up.Input(0)]
	if p == nil || p.Op != "MatMul" || g.Info(p.Outputs[0]).DType != dtype.BFloat16 {
		t.Fatalf("the Cast reads %v, want a bfloat16 MatMul", p)
	}
	for _, in := range p.Inputs {
		if dt := g.Info(in).DType; dt != dtype.BFloat16 {
			t.Errorf("the product reads %s in %v, want bfloat16", in, dt)
		}
	}
	var lowPads, casts32 int
	for _, n := range g.Nodes {
		if n.Op == "Pad" && g.Info(n.Input(0)).DType == dtype.BFloat16 {
			lowPads++
			if g.Info(n.Input(2)).DType != dtype.BFloat16 {
				t.Errorf("the low window's Pad has a %v constant, want it cast to bfloat16", g.Info(n.Input(2)).DType)
			}
		}
		if IsCast(n, dtype.Float32) && n.Input(0) == "x" {
			casts32++
		}
	}
	if lowPads != 1 {
		t.Errorf("%d Pads over the low input, want 1", lowPads)
	}
	if casts32 != 1 {
		t.Errorf("%d float32 copies of x, want the convolution's one", casts32)
	}
	if q := producers[inexact]; q == nil || q.Op != "MatMul" || g.Info(inexact).DType != dtype.Float32 {
		t.Errorf("the GEMM over a float32 sum is %v, want it as it was", q)
	}
	// Without a bfloat16 Pad the window goes low after the Pad, by one
	// Cast of the padded value.
	g, exact, _ = build()
	noLowPad := func(n *graph.Node, dt dtype.DType) bool { return all(n, dt) && (n.Op != "Pad" || dt == dtype.Float32) }
	if n := ExactLowProducts(g, dtype.BFloat16, noLowPad); n != 1 {
		t.Fatalf("without a bfloat16 Pad: %d products given the low type, want 1", n)
	}
	g.Prune()
	producers = g.Producers()
	for _, n := range g.Nodes {
		if n.Op == "Pad" && g.Info(n.Outputs[0]).DType != dtype.Float32 {
			t.Errorf("without a bfloat16 Pad: a Pad writes %v", g.Info(n.Outputs[0]).DType)
		}
	}
	p = producers[producers[exact].Input(0)]
	var sawCast bool
	for v := p.Inputs[1]; producers[v] != nil; v = producers[v].Input(0) {
		q := producers[v]
		if g.Info(q.Outputs[0]).DType != dtype.BFloat16 {
			t.Errorf("without a bfloat16 Pad: %s on the window's way writes %v", q.Op, g.Info(q.Outputs[0]).DType)
		}
		if IsCast(q, dtype.BFloat16) {
			sawCast = producers[q.Input(0)] != nil && producers[q.Input(0)].Op == "Pad"
			break
		}
	}
	if !sawCast {
		t.Errorf("without a bfloat16 Pad: the window does not start at a Cast of the Pad's output")
	}
	g, _, _ = build()
	none := func(n *graph.Node, dt dtype.DType) bool { return dt == dtype.Float32 }
	if n := ExactLowProducts(g, dtype.BFloat16, none); n != 0 {
		t.Errorf("without a low MatMul kernel %d products were given the low type", n)
	}
}
