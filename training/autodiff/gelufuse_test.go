package autodiff_test

import (
	"math/rand/v2"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// TestGeluChainSevenPasses: the exact GELU in elementary ops (the
// builder's form, torch.onnx's form, and the same under mixed precision's
// bfloat16 constants) gets its input's gradient in seven element-wise
// nodes instead of the ten the rules one by one write, and in six without
// the ½ (the chain graph.SinkScales leaves); a chain whose erf is read
// elsewhere too keeps the rules one by one.
func TestGeluChainSevenPasses(t *testing.T) {
	backward := func(low bool, form func(b *graph.Builder, x string) (string, string)) int {
		g := graph.New("mlp", graph.EmitOpset)
		dt := dtype.Float32
		if low {
			dt = dtype.BFloat16
		}
		g.AddInput("x", graph.Info{DType: dt, Known: true, Shape: []int64{4, 16}})
		b := graph.NewBuilder(g, "fwd/")
		m, extra := form(b, "x")
		loss := b.ReduceSum(m, false)
		if extra != "" {
			loss = b.Add(loss, b.ReduceSum(extra, false))
		}
		if b.Err != nil {
			t.Fatal(b.Err)
		}
		before := len(g.Nodes)
		if _, err := autodiff.Gradients(g, loss, []string{"x"}, "grad/"); err != nil {
			t.Fatal(err)
		}
		elementwise := 0
		for _, n := range g.Nodes[before:] {
			switch n.Op {
			case "Mul", "Add", "Sub", "Neg", "Exp", "Erf", "Div", "Sum":
				elementwise++
			}
		}
		return elementwise
	}
	constant := func(b *graph.Builder, x string, v float64) string {
		c := b.Scalar(dtype.Float32, v)
		if b.G.Info(x).DType == dtype.BFloat16 {
			c = b.Cast(c, dtype.BFloat16) // as autocast casts a constant
		}
		return c
	}
	builder := func(b *graph.Builder, x string) (string, string) {
		a := b.Add(constant(b, x, 1), b.Erf(b.Div(x, constant(b, x, 1.4142135623730951))))
		return b.Mul(b.Mul(x, constant(b, x, 0.5)), a), ""
	}
	torchForm := func(b *graph.Builder, x string) (string, string) {
		a := b.Add(b.Erf(b.Mul(x, constant(b, x, 0.7071067811865476))), constant(b, x, 1))
		return b.Mul(b.Mul(x, a), constant(b, x, 0.5)), ""
	}
	erfShared := func(b *graph.Builder, x string) (string, string) {
		e := b.Erf(b.Div(x, constant(b, x, 1.4142135623730951)))
		return b.Mul(b.Mul(x, constant(b, x, 0.5)), b.Add(constant(b, x, 1), e)), e
	}
	unscaled := func(b *graph.Builder, x string) (string, string) {
		a := b.Add(constant(b, x, 1), b.Erf(b.Div(x, constant(b, x, 1.4142135623730951))))
		return b.Mul(x, a), ""
	}
	for _, tc := range []struct {
		name string
		low  bool
		form func(b *graph.Builder, x string) (string, string)
		want int
	}{
		{"builder form", false, builder, 7},
		{"torch.onnx form", false, torchForm, 7},
		{"bfloat16 constants", true, builder, 7},
		{"without the ½", false, unscaled, 6},
	} {
		if n := backward(tc.low, tc.form); n != tc.want {
			t.Errorf("%s: %d element-wise backward nodes, want %d (the rules one by one write 10 to 14 here)", tc.name, n, tc.want)
		}
	}
	if n := backward(false, erfShared); n <= 7 {
		t.Errorf("erf read twice: %d element-wise backward nodes; the pattern must not take a chain whose inner value another op reads", n)
	}
}

// TestFuseGelus: the exact GELU in the builder's and torch.onnx's forms
// becomes one com.microsoft Gelu node computing the same values (to
// float32 rounding: the kernel rounds once where the chain rounded four
// times); chains with other constants, without the ½, or whose erf is read
// elsewhere too stay as they are, and so does every chain where the
// device has no kernel (can), the graph then importing no contrib domain.
func TestFuseGelus(t *testing.T) {
	orttest.Init(t)
	build := func() *graph.Graph {
		g := graph.New("mlp", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{4, 16}})
		b := graph.NewBuilder(g, "")
		c := func(v float64) string { return b.Scalar(dtype.Float32, v) }
		builder := b.Gelu("x")
		torchForm := b.Mul(b.Mul("x", b.Add(b.Erf(b.Mul("x", c(0.7071067811865476))), c(1))), c(0.5))
		other := b.Mul(b.Mul("x", b.Add(b.Erf(b.Div("x", c(1.7))), c(1))), c(-0.4))
		unscaled := b.Mul("x", b.Add(c(1), b.Erf(b.Div("x", c(1.4142135623730951)))))
		erf := b.Erf(b.Div("x", c(1.4142135623730951)))
		shared := b.Add(b.Mul(b.Mul("x", c(0.5)), b.Add(erf, c(1))), erf)
		g.Outputs = []string{builder, torchForm, other, unscaled, shared}
		if b.Err != nil {
			t.Fatal(b.Err)
		}
		return g
	}
	r := rand.New(rand.NewPCG(4, 5))
	feed := map[string]*ort.Value{"x": tensor(t, ort.Float32, []int64{4, 16}, fill(r, normal, 64))}
	t.Cleanup(feed["x"].Close)
	g := build()
	want := runOutputs(t, g, feed)
	if n := autodiff.FuseGelus(g, func(*graph.Node) bool { return true }); n != 2 {
		t.Errorf("fused %d chains, want 2 (the builder's and torch.onnx's)", n)
	}
	if gelus, erfs := g.CountOp("Gelu"), g.CountOp("Erf"); gelus != 2 || erfs != 3 {
		t.Errorf("%d Gelu and %d Erf nodes after, want 2 and 3", gelus, erfs)
	}
	sameOutputs(t, []string{"builder's", "torch.onnx's", "other constants", "unscaled", "shared erf"}, runOutputs(t, g, feed), want, 1e-6)

	g = build()
	if n := autodiff.FuseGelus(g, func(*graph.Node) bool { return false }); n != 0 || g.CountOp("Gelu") != 0 {
		t.Errorf("fused %d chains with no kernel", n)
	}
	if _, ok := g.Domains[graph.MSDomain]; ok {
		t.Error("the graph imports com.microsoft with nothing of it")
	}
}
