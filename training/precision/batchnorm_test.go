package precision

import (
	"slices"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// readsWritesLow checks that BatchNormalization n reads all five inputs
// and writes its output in low.
func readsWritesLow(t *testing.T, g *graph.Graph, n *graph.Node, low dtype.DType) {
	t.Helper()
	for i := range 5 {
		if dt := g.Info(n.Input(i)).DType; dt != low {
			t.Errorf("%s: input %d is %v", n.Describe(), i, dt)
		}
	}
	if dt := g.Info(n.Output(0)).DType; dt != low {
		t.Errorf("%s writes %v", n.Describe(), dt)
	}
}

// bnGraph is autocast's BatchNorm pattern, Cast(h, float32) → BN →
// Cast(low) → Relu, over a low input h; extra adds a float32 reader of the
// BN's output.
func bnGraph(low dtype.DType, extra bool) *graph.Graph {
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("h", graph.Info{DType: low, Known: true, Shape: []int64{2, 3, 4, 4}})
	for _, p := range []string{"gamma", "beta", "mean", "var"} {
		g.AddInput(p, graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{3}})
	}
	b := graph.NewBuilder(g, "")
	y := b.Op("BatchNormalization", []string{b.Cast("h", dtype.Float32), "gamma", "beta", "mean", "var"})
	g.Outputs = []string{b.Relu(b.Cast(y, low))}
	if extra {
		g.Outputs = append(g.Outputs, b.ReduceSum(y, false))
	}
	return g
}

// TestLowBatchNorms: the pattern is rewritten where the device has the
// kernel (the BN reads h, its per-channel inputs cast together, and its
// output is the low value the Relu reads), and left alone where it lacks
// one or where a float32 op reads the BN's output.
func TestLowBatchNorms(t *testing.T) {
	all := func(*graph.Node, dtype.DType) bool { return true }
	none := func(*graph.Node, dtype.DType) bool { return false }
	for _, tc := range []struct {
		name  string
		low   dtype.DType
		extra bool
		k     Kernels
		want  int
	}{
		{"float16", dtype.Float16, false, all, 1},
		{"no kernel", dtype.Float16, false, none, 0},
		{"float32 reader", dtype.Float16, true, all, 0},
		{"bfloat16", dtype.BFloat16, false, all, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := bnGraph(tc.low, tc.extra)
			if got, err := LowBatchNorms(g, tc.low, tc.k); err != nil || got != tc.want {
				t.Fatalf("rewrote %d BatchNorms (%v), want %d", got, err, tc.want)
			}
			g.Prune()
			if err := g.Sort(); err != nil {
				t.Fatal(err)
			}
			var bn *graph.Node
			for _, n := range g.Nodes {
				if n.Op == "BatchNormalization" {
					bn = n
				}
			}
			if tc.want == 0 {
				if bn.Input(0) == "h" {
					t.Fatalf("%s reads h", bn.Describe())
				}
				return
			}
			if bn.Input(0) != "h" {
				t.Fatalf("%s does not read h", bn.Describe())
			}
			readsWritesLow(t, g, bn, tc.low)
			for _, n := range g.Nodes {
				if n.Op == "Relu" && n.Input(0) != bn.Output(0) {
					t.Errorf("%s does not read the BatchNorm's output", n.Describe())
				}
			}
			if casts := g.CountOp("Cast"); casts != 1 {
				t.Errorf("%d Casts, want 1 (the per-channel inputs together)", casts)
			}
		})
	}
}

// bnGradGraph is the element-wise part of a training BatchNorm's backward
// as autodiff writes it over a low input x and gradient g: w = BN(x32, s,
// t, μ, σ²), h = g32 - w, dX = BN(h, γ, 0, 0, σ²), cast to low for the
// Relu after it, with the reductions over g32 and g32·x̂, x̂ = BN(x32, 1,
// 0, μ, σ²). gFloat computes g32 in float32 instead (a CPU build's Relu
// gradient).
func bnGradGraph(low dtype.DType, gFloat bool) *graph.Graph {
	g := graph.New("t", graph.EmitOpset)
	for _, v := range []string{"x", "g"} {
		g.AddInput(v, graph.Info{DType: low, Known: true, Shape: []int64{2, 3, 4, 4}})
	}
	for _, p := range []string{"gamma", "one", "zero", "mean", "var", "sums"} {
		g.AddInput(p, graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{3}})
	}
	b := graph.NewBuilder(g, "")
	x32, g32 := b.Cast("x", dtype.Float32), b.Cast("g", dtype.Float32)
	if gFloat {
		g32 = b.Relu(g32)
	}
	s, t := b.Neg("sums"), b.Sqrt("sums") // per-channel values computed in the graph
	w := b.Op("BatchNormalization", []string{x32, s, t, "mean", "var"})
	dx := b.Op("BatchNormalization", []string{b.Sub(g32, w), "gamma", "zero", "zero", "var"})
	xhat := b.Op("BatchNormalization", []string{x32, "one", "zero", "mean", "var"})
	// The forward's BatchNorm recomputed, for the Relu's gradient.
	y := b.Op("BatchNormalization", []string{x32, "gamma", "zero", "mean", "var"})
	g.Outputs = []string{b.Relu(b.Cast(dx, low)), b.ReduceSum(g32, false), b.ReduceSum(b.Mul(g32, xhat), false),
		b.Greater(b.Cast(y, low), b.ScalarLike("x", 0))}
	return g
}

// TestLowBatchNormGrads: the backward's w, g - w and dX read and write the
// low type where the device has the kernels (reading x and g, not their
// float32 copies; dX is the value the Relu reads), and x̂ reads x, its
// output cast up for the product with g32, which the reductions read
// still; all three left alone without the kernels or where the gradient
// is a float32 value of its own. The forward's BatchNorm recomputed over
// the same float32 copy is rewritten as LowBatchNorms does any.
func TestLowBatchNormGrads(t *testing.T) {
	all := func(*graph.Node, dtype.DType) bool { return true }
	noSub := func(n *graph.Node, _ dtype.DType) bool { return n.Op != "Sub" }
	for _, tc := range []struct {
		name   string
		gFloat bool
		k      Kernels
		want   int
	}{
		{"float16", false, all, 3},
		{"no Sub kernel", false, noSub, 1},
		{"float32 gradient", true, all, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := bnGradGraph(dtype.Float16, tc.gFloat)
			if got, err := LowBatchNorms(g, dtype.Float16, tc.k); err != nil || got != tc.want {
				t.Fatalf("rewrote %d (%v), want %d", got, err, tc.want)
			}
			g.Prune()
			if err := g.Sort(); err != nil {
				t.Fatal(err)
			}
			var bns []*graph.Node
			var sub, relu *graph.Node
			for _, n := range g.Nodes {
				switch n.Op {
				case "BatchNormalization":
					bns = append(bns, n)
				case "Sub":
					sub = n
				case "Relu":
					if n.Output(0) == g.Outputs[0] {
						relu = n
					}
				}
			}
			if len(bns) != 4 {
				t.Fatalf("%d BatchNorms, want 4", len(bns))
			}
			if tc.want == 1 {
				for _, n := range bns {
					forward := n.Input(1) != "gamma" && n.Input(1) != "one" && g.Consumers()[n.Output(0)][0].Op == "Greater"
					if dt := g.Info(n.Output(0)).DType; (dt == dtype.Float16) != forward {
						t.Errorf("%s writes %v", n.Describe(), dt)
					}
				}
				return
			}
			var xhat, w, dx, fwd *graph.Node
			consumers := g.Consumers()
			for _, n := range bns {
				switch {
				case consumers[n.Output(0)][0].Op == "Greater":
					fwd = n
				case consumers[n.Output(0)][0].Op == "Cast":
					xhat = n
				case n.Input(0) == sub.Output(0):
					dx = n
				default:
					w = n
				}
			}
			if xhat == nil || w == nil || dx == nil || fwd == nil {
				t.Fatalf("x̂ %v, w %v, dX %v, the forward's %v", xhat, w, dx, fwd)
			}
			if xhat.Input(0) != "x" {
				t.Errorf("x̂ reads %s, want x", xhat.Input(0))
			}
			if w.Input(0) != "x" || sub.Input(0) != "g" || sub.Input(1) != w.Output(0) || dx.Input(0) != sub.Output(0) || relu.Input(0) != dx.Output(0) {
				t.Fatalf("not rewired: %s, %s, %s, %s", w.Describe(), sub.Describe(), dx.Describe(), relu.Describe())
			}
			for _, n := range []*graph.Node{xhat, w, dx, fwd} {
				readsWritesLow(t, g, n, dtype.Float16)
			}
			// g's float32 copy (for the reductions), x̂'s up, gamma, one,
			// zero, mean and var together, and each computed per-channel
			// value.
			if casts := g.CountOp("Cast"); casts != 5 {
				t.Errorf("%d Casts, want 5", casts)
			}
		})
	}
}

// TestLowRowStatistics: a LayerNormalization that only computes
// statistics (its normalised output unread) over a float32 copy of a low
// value reads the low value, its scale cast once, and writes its unread
// output in the low type, its statistics in float32; one whose output is
// read, or without the kernel, is left alone.
func TestLowRowStatistics(t *testing.T) {
	build := func(read bool) (*graph.Graph, *graph.Node) {
		g := graph.New("t", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: dtype.Float16, Known: true, Shape: []int64{2, 3, 8, 8}})
		g.AddInput("ones", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{8, 8}})
		b := graph.NewBuilder(g, "")
		outs := b.OpN("LayerNormalization", []string{b.Cast("x", dtype.Float32), "ones"}, 3, graph.AInt("axis", 2))
		g.Outputs = []string{b.ReduceSum(b.Mul(outs[1], outs[2]), false)}
		if read {
			g.Outputs = append(g.Outputs, outs[0])
		}
		return g, g.Nodes[len(g.Nodes)-3]
	}
	all := func(*graph.Node, dtype.DType) bool { return true }
	none := func(*graph.Node, dtype.DType) bool { return false }
	g, ln := build(false)
	if n := LowRowStatistics(g, dtype.Float16, all); n != 1 {
		t.Fatalf("rewrote %d, want 1", n)
	}
	g.Prune()
	if err := g.Sort(); err != nil {
		t.Fatal(err)
	}
	if ln.Input(0) != "x" || g.Info(ln.Input(1)).DType != dtype.Float16 || g.Info(ln.Output(0)).DType != dtype.Float16 ||
		g.Info(ln.Output(1)).DType != dtype.Float32 || g.Info(ln.Output(2)).DType != dtype.Float32 {
		t.Errorf("%s: inputs %v %v, outputs %v %v %v", ln.Describe(), g.Info(ln.Input(0)).DType, g.Info(ln.Input(1)).DType,
			g.Info(ln.Output(0)).DType, g.Info(ln.Output(1)).DType, g.Info(ln.Output(2)).DType)
	}
	if casts := g.CountOp("Cast"); casts != 1 {
		t.Errorf("%d Casts, want 1 (the scale's)", casts)
	}
	for _, tc := range []struct {
		name string
		read bool
		k    Kernels
	}{{"output read", true, all}, {"no kernel", false, none}} {
		g, _ := build(tc.read)
		if n := LowRowStatistics(g, dtype.Float16, tc.k); n != 0 {
			t.Errorf("%s: rewrote %d", tc.name, n)
		}
	}
}

// TestLowRowProducts: a LayerNormalization that only computes statistics
// over a product of two float32 copies of low values (a BatchNorm
// backward's g·x̂/8), which nothing else reads, has the product taken in
// the low type from the low values and reads it: no Cast but the scale's
// is left. A product read elsewhere, one with an operand computed in
// float32, or no low Mul kernel leaves both alone.
func TestLowRowProducts(t *testing.T) {
	build := func(readMul, fullOperand bool) (*graph.Graph, *graph.Node, *graph.Node) {
		g := graph.New("t", graph.EmitOpset)
		for _, v := range []string{"g", "x"} {
			g.AddInput(v, graph.Info{DType: dtype.Float16, Known: true, Shape: []int64{2, 3, 8, 8}})
		}
		g.AddInput("ones", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{8, 8}})
		b := graph.NewBuilder(g, "")
		right := b.Cast("x", dtype.Float32)
		if fullOperand {
			right = b.Relu(right)
		}
		p := b.Mul(b.Cast("g", dtype.Float32), right)
		outs := b.OpN("LayerNormalization", []string{p, "ones"}, 3, graph.AInt("axis", 2))
		g.Outputs = []string{b.ReduceSum(outs[1], false)}
		if readMul {
			g.Outputs = append(g.Outputs, b.ReduceSum(p, false))
		}
		producers := g.Producers()
		return g, producers[p], producers[outs[1]]
	}
	all := func(*graph.Node, dtype.DType) bool { return true }
	g, mul, ln := build(false, false)
	if n := LowRowStatistics(g, dtype.Float16, all); n != 1 {
		t.Fatalf("rewrote %d, want 1", n)
	}
	g.Prune()
	if err := g.Sort(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(mul.Inputs, []string{"g", "x"}) || g.Info(mul.Output(0)).DType != dtype.Float16 || ln.Input(0) != mul.Output(0) ||
		g.Info(ln.Input(1)).DType != dtype.Float16 || g.Info(ln.Output(1)).DType != dtype.Float32 {
		t.Errorf("%s (%v), %s", mul.Describe(), g.Info(mul.Output(0)).DType, ln.Describe())
	}
	if casts := g.CountOp("Cast"); casts != 1 {
		t.Errorf("%d Casts, want 1 (the scale's)", casts)
	}
	noMul := func(n *graph.Node, _ dtype.DType) bool { return n.Op != "Mul" }
	for _, tc := range []struct {
		name              string
		readMul, fullOper bool
		k                 Kernels
	}{{"product read", true, false, all}, {"float32 operand", false, true, all}, {"no Mul kernel", false, false, noMul}} {
		g, mul, _ := build(tc.readMul, tc.fullOper)
		if n := LowRowStatistics(g, dtype.Float16, tc.k); n != 0 || g.Info(mul.Output(0)).DType != dtype.Float32 {
			t.Errorf("%s: rewrote %d, product %v", tc.name, n, g.Info(mul.Output(0)).DType)
		}
	}
}
