package autodiff_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// Engine behaviour beyond single rules, each also checked numerically:
// fan-out, paths cut by non-differentiable ops, shared subexpressions.
var engineCases = []fdCase{
	{name: "fan-out x*x+x", dtype: f64, ins: ins(normal, s(3, 2)), build: func(b *graph.Builder, x []string) string {
		return b.Add(b.Mul(x[0], x[0]), b.Sigmoid(x[0]))
	}},
	{name: "mask through comparison is cut", dtype: f64, ins: ins(away, s(2, 4)), build: func(b *graph.Builder, x []string) string {
		mask := b.Cast(b.Greater(x[0], b.Scalar(f64, 0)), f64)
		return b.Mul(x[0], mask)
	}},
	{name: "ArgMax and Shape paths are cut", dtype: f64, ins: ins(distinct, s(2, 3)), build: func(b *graph.Builder, x []string) string {
		idx := b.Cast(b.Op("ArgMax", []string{x[0]}, ai("axis", 1)), f64)
		return b.Mul(b.Reshape(b.Mul(x[0], idx), b.Shape(x[0])), b.Tanh(x[0]))
	}},
	{name: "diamond through two branches", dtype: f64, ins: ins(normal, s(2, 3), s(3, 3)), build: func(b *graph.Builder, x []string) string {
		h := b.MatMul(x[0], x[1])
		return b.Sub(b.Exp(b.Neg(h)), b.MatMul(h, x[1]))
	}},
}

func TestEngineAgainstFiniteDifferences(t *testing.T) {
	for i, c := range engineCases {
		t.Run(c.name, func(t *testing.T) { checkFD(t, c, uint64(100+i)) })
	}
}

// run builds loss(x...) with the given graph body, differentiates with
// respect to wrt, and returns the gradients for the fed values.
func gradsOf(t *testing.T, shapes [][]int64, wrt []string, body func(b *graph.Builder, x []string) string, feed [][]float64) (map[string][]float64, *graph.Graph) {
	t.Helper()
	g := graph.New("t", graph.EmitOpset)
	var names []string
	for i, sh := range shapes {
		n := string(rune('a' + i))
		g.AddInput(n, graph.Info{DType: f64, Known: true, Shape: sh})
		names = append(names, n)
	}
	b := graph.NewBuilder(g, "")
	loss := body(b, names)
	grads, err := autodiff.Gradients(g, loss, wrt, "grad/")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wrt {
		g.Outputs = append(g.Outputs, grads[w])
	}
	g.Prune()
	g.StripStopGradients()
	m, _ := g.Marshal()
	orttest.Init(t)
	sess, err := ort.NewSessionFromBytes(m, ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	in := map[string]*ort.Value{}
	for i, n := range names {
		in[n] = tensor(t, f64, shapes[i], feed[i])
		defer in[n].Close()
	}
	outs, err := sess.Run(in)
	if err != nil {
		t.Fatal(err)
	}
	res := map[string][]float64{}
	for i, w := range wrt {
		res[w] = values(outs[i])
		outs[i].Close()
	}
	return res, g
}

// TestSharedEqualsIndependent: a tensor read by two ops gets the sum of the
// gradients two independent tensors with the same value get.
func TestSharedEqualsIndependent(t *testing.T) {
	x := []float64{0.3, -1.2, 0.7, 2.0, -0.4, 1.1}
	w := []float64{0.5, -0.25, 1.5, 0.75, -1, 0.2}
	f := func(b *graph.Builder, p, q, w string) string {
		return b.ReduceSum(b.Mul(b.Tanh(b.MatMul(p, w)), b.Exp(b.Neg(b.MatMul(q, w)))), false)
	}
	shared, _ := gradsOf(t, [][]int64{{2, 3}, {3, 2}}, []string{"a"}, func(b *graph.Builder, v []string) string {
		return f(b, v[0], v[0], v[1])
	}, [][]float64{x, w})
	indep, _ := gradsOf(t, [][]int64{{2, 3}, {2, 3}, {3, 2}}, []string{"a", "b"}, func(b *graph.Builder, v []string) string {
		return f(b, v[0], v[1], v[2])
	}, [][]float64{x, x, w})
	for i := range x {
		want := indep["a"][i] + indep["b"][i]
		if math.Abs(shared["a"][i]-want) > 1e-12 {
			t.Errorf("shared grad[%d] = %g, independent sum %g", i, shared["a"][i], want)
		}
	}
}

// TestFrozenGetsNoGradientAndPrunes: only the weight's gradient is asked
// for, so no gradient reaches the frozen input and the dX branch of Conv
// (a ConvTranspose) is never emitted.
func TestFrozenGetsNoGradientAndPrunes(t *testing.T) {
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: f32, Known: true, Shape: []int64{-1, 2, 5, 5}})
	g.AddInput("w", graph.Info{DType: f32, Known: true, Shape: []int64{3, 2, 3, 3}})
	g.AddInput("frozen", graph.Info{DType: f32, Known: true, Shape: []int64{3, 2, 3, 3}})
	b := graph.NewBuilder(g, "")
	y := b.Add(b.Op("Conv", []string{"x", "w"}), b.Op("Conv", []string{"x", "frozen"}))
	loss := b.ReduceMean(b.Mul(y, y), false)
	grads, err := autodiff.Gradients(g, loss, []string{"w"}, "grad/")
	if err != nil {
		t.Fatal(err)
	}
	if len(grads) != 1 || grads["w"] == "" {
		t.Fatalf("grads = %v, want only w", grads)
	}
	g.Outputs = []string{grads["w"]}
	g.Prune()
	for _, n := range g.Nodes {
		if n.Op == "ConvTranspose" {
			t.Errorf("node %s computes an input gradient nobody asked for", n.Name)
		}
	}
	if gi := g.Info(grads["w"]); !gi.Static() || gi.Shape[0] != 3 {
		t.Errorf("gradient of w has facts %v, want float32[3,2,3,3]", gi)
	}
}

func TestBadInputErrors(t *testing.T) {
	type badInput interface{ BadInput() bool }
	cases := []struct {
		name string
		body func(b *graph.Builder) string
		want []string
	}{
		{"op without rule names op and node", func(b *graph.Builder) string {
			return b.ReduceSum(b.Op("Det", []string{"w"}), false)
		}, []string{"Det", "--frozen", "w"}},
		{"float Mod without fmod=1", func(b *graph.Builder) string {
			return b.ReduceSum(b.Op("Mod", []string{"w", "w"}), false)
		}, []string{"Mod", "fmod=1"}},
		{"non-scalar loss", func(b *graph.Builder) string { return b.Mul("w", "w") }, []string{"scalar", "float64[2,3]"}},
		{"loss of unknown shape", func(b *graph.Builder) string {
			b.G.AddInput("dims", graph.Info{DType: ort.Int64, Known: true, Shape: []int64{-1}})
			return b.Reshape("w", "dims")
		}, []string{"cannot tell its shape", "Reshape to shape []", "keepdims=0"}},
		{"integer loss", func(b *graph.Builder) string {
			return b.ReduceSum(b.Op("ArgMax", []string{"w"}, ai("axis", 1), ai("keepdims", 0)), false)
		}, []string{"scalar"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := graph.New("t", graph.EmitOpset)
			g.AddInput("w", graph.Info{DType: f64, Known: true, Shape: []int64{2, 3}})
			loss := c.body(graph.NewBuilder(g, ""))
			_, err := autodiff.Gradients(g, loss, []string{"w"}, "grad/")
			var bi badInput
			if err == nil || !errors.As(err, &bi) || !bi.BadInput() {
				t.Fatalf("err = %v, want a bad-input error", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
