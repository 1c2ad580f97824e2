package autodiff_test

import (
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// normChain writes (x − μ)/√(v + eps) over axes with elementary ops, as
// models/internal/nn's GroupNorm does; epsFirst puts the constant first in
// the Add; extra, when set, also reads d = x − μ outside the chain (the
// pattern must then not be taken as a whole).
func normChain(b *graph.Builder, x string, eps float64, epsFirst, extra bool, axes ...int64) string {
	d := b.Sub(x, b.ReduceMean(x, true, axes...))
	v := b.ReduceMean(b.Mul(d, d), true, axes...)
	e := b.ScalarLike(x, eps)
	a := b.Add(v, e)
	if epsFirst {
		a = b.Add(e, v)
	}
	y := b.Div(d, b.Sqrt(a))
	if extra {
		y = b.Add(y, b.Mul(d, b.ScalarLike(x, 0.5)))
	}
	return y
}

// groupNormChain is nn.GroupNorm's form: [N, C, ...] grouped as [N, groups,
// -1], normalised, shaped back and scaled and shifted per channel by x[1]
// and x[2] (each [C, 1, ...]).
func groupNormChain(groups int64) func(b *graph.Builder, x []string) string {
	return func(b *graph.Builder, x []string) string {
		shape := b.Info(x[0]).Shape
		y := normChain(b, b.Reshape(x[0], b.Ints(0, groups, -1)), 1e-6, false, false, 2)
		y = b.Reshape(y, b.Ints(append([]int64{0}, shape[1:]...)...))
		return b.Add(b.Mul(y, x[1]), x[2])
	}
}

// groupNormFlatAffine is nn.GroupNorm exactly: weight and bias [C],
// reshaped to [C, 1, ...] in the forward, so their gradients are reduced
// by one ReduceSum each (foldReduceSums).
func groupNormFlatAffine(groups int64) func(b *graph.Builder, x []string) string {
	return func(b *graph.Builder, x []string) string {
		xi := b.Info(x[0])
		bshape := append([]int64{xi.Shape[1]}, make([]int64, xi.Rank()-2)...)
		for i := 1; i < len(bshape); i++ {
			bshape[i] = 1
		}
		w, c := b.Reshape(x[1], b.Ints(bshape...)), b.Reshape(x[2], b.Ints(bshape...))
		return groupNormChain(groups)(b, []string{x[0], w, c})
	}
}

var normChainCases = []fdCase{
	{name: "NormChain/groupnorm-flat-affine-3d", dtype: f64, ins: ins(normal, s(2, 6, 2, 3, 2), s(6), s(6)), build: groupNormFlatAffine(3)},
	{name: "NormChain/groupnorm-affine-3d", dtype: f64, ins: ins(normal, s(2, 4, 3, 2, 2), s(4, 1, 1, 1), s(4, 1, 1, 1)), build: groupNormChain(2)},
	{name: "NormChain/last-axis-eps-first", dtype: f64, ins: ins(normal, s(3, 5)), build: func(b *graph.Builder, x []string) string {
		return normChain(b, x[0], 1e-3, true, false, -1)
	}},
	{name: "NormChain/all-axes", dtype: f64, ins: ins(normal, s(2, 3)), build: func(b *graph.Builder, x []string) string {
		return normChain(b, x[0], 1e-5, false, false)
	}},
	{name: "NormChain/centred-read-outside", dtype: f64, ins: ins(normal, s(2, 6)), build: func(b *graph.Builder, x []string) string {
		return normChain(b, x[0], 1e-5, false, true, 1)
	}},
}

func init() { ruleCases = append(ruleCases, normChainCases...) }

// TestNormChainNodes checks that the elementary GroupNorm's backward is the
// fused one: 2 ReduceMeans, no Sqrt or Shape and no Expand but the
// loss's (the op-by-op backward expands the gradients of its 2
// ReduceMeans, and Sqrt's rule divides by its output), and that a chain whose centred value is
// read elsewhere falls back to the op-by-op rules.
func TestNormChainNodes(t *testing.T) {
	backward := func(extra bool) map[string]int {
		g := graph.New("gn", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 8, 4, 4, 4}})
		b := graph.NewBuilder(g, "fwd/")
		xr := b.Reshape("x", b.Ints(0, 4, -1))
		y := normChain(b, xr, 1e-6, false, extra, 2)
		loss := b.ReduceSum(b.Mul(y, y), false)
		first := len(g.Nodes)
		if _, err := autodiff.Gradients(g, loss, []string{"x"}, "grad/"); err != nil {
			t.Fatal(err)
		}
		g.Outputs = []string{loss}
		ops := map[string]int{}
		for _, n := range g.Nodes[first:] {
			ops[n.Op]++
		}
		return ops
	}
	// The loss's ReduceSum is differentiated with one Expand.
	if ops := backward(false); ops["ReduceMean"] != 2 || ops["Sqrt"]+ops["Shape"]+ops["ReduceSum"] != 0 || ops["Expand"] != 1 || ops["Div"] != 1 {
		t.Errorf("fused chain's backward: %v; want 2 ReduceMean, 1 Div, 1 Expand (the loss's), no Sqrt, Shape or ReduceSum", ops)
	}
	if ops := backward(true); ops["Expand"] < 3 {
		t.Errorf("a chain whose d is read elsewhere was fused: backward %v", ops)
	}
}

// TestGroupNormAffineOneReduceSum checks that the gradients of nn.GroupNorm's
// [C] weight and bias, reshaped to [C, 1, 1, 1] in the forward, are each
// one ReduceSum and a Reshape (fails before: two ReduceSums each, the
// broadcast axes then the batch axis).
func TestGroupNormAffineOneReduceSum(t *testing.T) {
	g := graph.New("gn", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 8, 4, 4, 4}})
	g.AddInput("w", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{8}})
	g.AddInput("c", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{8}})
	b := graph.NewBuilder(g, "fwd/")
	y := groupNormFlatAffine(4)(b, []string{"x", "w", "c"})
	loss := b.ReduceMean(b.Mul(y, y), false)
	grads, err := autodiff.Gradients(g, loss, []string{"w", "c"}, "grad/")
	if err != nil {
		t.Fatal(err)
	}
	prod := g.Producers()
	for _, w := range []string{"w", "c"} {
		r := prod[grads[w]]
		if r == nil || r.Op != "Reshape" {
			t.Fatalf("d%s is made by %v, want a Reshape", w, r)
		}
		if s := prod[r.Inputs[0]]; s == nil || s.Op != "ReduceSum" || prod[s.Inputs[0]] == nil || prod[s.Inputs[0]].Op == "ReduceSum" {
			t.Errorf("d%s: the Reshape reads %v, want one ReduceSum of a product", w, s)
		}
	}
}
