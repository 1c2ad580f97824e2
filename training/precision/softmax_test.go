package precision

import (
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// TestLowSoftmaxes: Cast(s, float32) → Softmax → Cast(low) → MatMul, with a
// float32 reader as a backward has: the Softmax reads s and writes the low
// value the MatMul reads, and the float32 reader reads a Cast of it made
// just before it. Without the kernel, or with no Cast to low reading the
// output, nothing changes.
func TestLowSoftmaxes(t *testing.T) {
	build := func(lowReader bool) *graph.Graph {
		g := graph.New("t", graph.EmitOpset)
		g.AddInput("s", graph.Info{DType: dtype.BFloat16, Known: true, Shape: []int64{2, 4, 4}})
		g.AddInput("v", graph.Info{DType: dtype.BFloat16, Known: true, Shape: []int64{2, 4, 3}})
		g.AddInput("d", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 4, 4}})
		b := graph.NewBuilder(g, "")
		p := b.Softmax(b.Cast("s", dtype.Float32), -1)
		if lowReader {
			g.Outputs = []string{b.MatMul(b.Cast(p, dtype.BFloat16), "v")}
		}
		b.Op("Relu", []string{"d"}) // a node between the forward and the float32 reader
		g.Outputs = append(g.Outputs, b.Mul(p, "d"))
		return g
	}
	all := func(*graph.Node, dtype.DType) bool { return true }
	none := func(*graph.Node, dtype.DType) bool { return false }
	for _, tc := range []struct {
		name      string
		lowReader bool
		k         Kernels
		want      int
	}{{"kernel", true, all, 1}, {"no kernel", true, none, 0}, {"no low reader", false, all, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			g := build(tc.lowReader)
			if got := LowSoftmaxes(g, dtype.BFloat16, tc.k); got != tc.want {
				t.Fatalf("rewrote %d Softmaxes, want %d", got, tc.want)
			}
			g.Prune()
			if err := g.Sort(); err != nil {
				t.Fatal(err)
			}
			var sm, mul, mm *graph.Node
			at := map[*graph.Node]int{}
			for i, n := range g.Nodes {
				at[n] = i
				switch n.Op {
				case "Softmax":
					sm = n
				case "Mul":
					mul = n
				case "MatMul":
					mm = n
				}
			}
			if tc.want == 0 {
				if sm.Input(0) == "s" {
					t.Fatalf("%s reads s", sm.Describe())
				}
				return
			}
			if sm.Input(0) != "s" || g.Info(sm.Output(0)).DType != dtype.BFloat16 || mm.Input(0) != sm.Output(0) {
				t.Fatalf("%s, %s", sm.Describe(), mm.Describe())
			}
			up := g.Producers()[mul.Input(0)]
			if up.Op != "Cast" || up.Input(0) != sm.Output(0) || g.Info(mul.Input(0)).DType != dtype.Float32 || at[up] != at[mul]-1 {
				t.Errorf("the float32 reader %s reads %s at %d, itself at %d", mul.Describe(), up.Describe(), at[up], at[mul])
			}
		})
	}
}

// TestLowSoftmaxesSharedReader: two Softmaxes whose float32 outputs one
// node reads first both get their float32 copy before it.
func TestLowSoftmaxesSharedReader(t *testing.T) {
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("v", graph.Info{DType: dtype.BFloat16, Known: true, Shape: []int64{2, 4, 3}})
	b := graph.NewBuilder(g, "")
	var ps []string
	for _, s := range []string{"s1", "s2"} {
		g.AddInput(s, graph.Info{DType: dtype.BFloat16, Known: true, Shape: []int64{2, 4, 4}})
		p := b.Softmax(b.Cast(s, dtype.Float32), -1)
		g.Outputs = append(g.Outputs, b.MatMul(b.Cast(p, dtype.BFloat16), "v"))
		ps = append(ps, p)
	}
	g.Outputs = append(g.Outputs, b.Mul(ps[0], ps[1]))
	if n := LowSoftmaxes(g, dtype.BFloat16, func(*graph.Node, dtype.DType) bool { return true }); n != 2 {
		t.Fatalf("rewrote %d Softmaxes, want 2", n)
	}
	producers := g.Producers()
	for _, p := range ps {
		if c := producers[p]; c == nil || c.Op != "Cast" || g.Info(p).DType != dtype.Float32 {
			t.Errorf("%s: produced by %v", p, c)
		}
	}
	if err := g.Sort(); err != nil {
		t.Fatal(err)
	}
}

// softmaxGradGraph is a softmax's gradient as a build for a device with
// the low Softmax writes it: P and dP float32 copies of low values, r
// their rows' sums in float32, P ⊙ (dP - r) cast to low for the product
// after it. dpFloat computes dP in float32 instead; shifted has dP - r
// come from the product as "dp" (autodiff's attention form), no Sub.
func softmaxGradGraph(low dtype.DType, dpFloat, shifted bool) *graph.Graph {
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("s", graph.Info{DType: low, Known: true, Shape: []int64{2, 3, 4, 4}})
	g.AddInput("dp", graph.Info{DType: low, Known: true, Shape: []int64{2, 3, 4, 4}})
	g.AddInput("r", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 3, 4, 1}})
	b := graph.NewBuilder(g, "")
	p := b.Op("Softmax", []string{"s"}, graph.AInt("axis", -1))
	dp := b.Cast("dp", dtype.Float32)
	if dpFloat {
		dp = b.Relu(dp)
	}
	if !shifted {
		dp = b.Sub(dp, "r")
	}
	ds := b.Mul(b.Cast(p, dtype.Float32), dp)
	g.Outputs = []string{b.MatMul(b.Cast(ds, low), "s")}
	return g
}

// TestLowSoftmaxGrads: dP - r and P ⊙ (dP - r) read and write the low
// type where the device has the kernels (reading dP and P themselves, r
// cast; the product is the value the MatMul reads, Sub's operands in
// their order); left alone without a Sub kernel or where dP is a float32
// value of its own.
func TestLowSoftmaxGrads(t *testing.T) {
	all := func(*graph.Node, dtype.DType) bool { return true }
	noSub := func(n *graph.Node, _ dtype.DType) bool { return n.Op != "Sub" }
	for _, tc := range []struct {
		name    string
		dpFloat bool
		k       Kernels
		want    int
	}{{"bfloat16", false, all, 1}, {"no Sub kernel", false, noSub, 0}, {"float32 dP", true, all, 0}} {
		g := softmaxGradGraph(dtype.BFloat16, tc.dpFloat, false)
		if n := LowSoftmaxGrads(g, dtype.BFloat16, tc.k); n != tc.want {
			t.Errorf("%s: rewrote %d, want %d", tc.name, n, tc.want)
			continue
		}
		g.Prune()
		if err := g.Sort(); err != nil {
			t.Fatal(err)
		}
		var sub, mul, mm *graph.Node
		for _, n := range g.Nodes {
			switch n.Op {
			case "Sub":
				sub = n
			case "Mul":
				mul = n
			case "MatMul":
				mm = n
			}
		}
		lowOut := g.Info(mul.Output(0)).DType == dtype.BFloat16
		if lowOut != (tc.want == 1) {
			t.Errorf("%s: the product is %v", tc.name, g.Info(mul.Output(0)).DType)
		}
		if tc.want == 0 {
			continue
		}
		if sub.Input(0) != "dp" || g.Info(sub.Input(1)).DType != dtype.BFloat16 || mm.Input(0) != mul.Output(0) ||
			g.Info(mul.Input(0)).DType != dtype.BFloat16 || mul.Input(1) != sub.Output(0) {
			t.Errorf("%s: not rewired: %s, %s, %s", tc.name, sub.Describe(), mul.Describe(), mm.Describe())
		}
	}
}

// TestSoftmaxGradTo: the product of a softmax's gradient cast to low is
// the pattern LowSoftmaxGrads rewrites, also with its Sub flattened behind
// a Reshape as cudaform leaves it; cast to another type, or with the
// Reshape read elsewhere too, it is not.
func TestSoftmaxGradTo(t *testing.T) {
	for _, tc := range []struct {
		name          string
		flat, twoRead bool
		to            dtype.DType
		want          bool
	}{{"plain", false, false, dtype.BFloat16, true}, {"flattened", true, false, dtype.BFloat16, true},
		{"other type", false, false, dtype.Float16, false}, {"view read twice", true, true, dtype.BFloat16, false}} {
		g := graph.New("t", graph.EmitOpset)
		g.AddInput("s", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 4, 4}})
		g.AddInput("dp", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 4, 4}})
		g.AddInput("r", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 4, 1}})
		b := graph.NewBuilder(g, "")
		p := b.Op("Softmax", []string{"s"}, graph.AInt("axis", -1))
		d := b.Sub("dp", "r")
		if tc.flat {
			d = b.Reshape(b.Sub(b.Reshape("dp", b.Ints(8, 4)), b.Reshape("r", b.Ints(8, 1))), b.Ints(2, 4, 4))
		}
		mul := b.Mul(p, d)
		g.Outputs = []string{b.Cast(mul, dtype.BFloat16)}
		if tc.twoRead {
			g.Outputs = append(g.Outputs, b.Relu(d))
		}
		if b.Err != nil {
			t.Fatal(b.Err)
		}
		producers := g.Producers()
		if got := SoftmaxGradTo(producers, g.Consumers(), g.OutputSet(), producers[mul], tc.to); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLowSoftmaxGradsShifted: where autodiff formed dP - r in the product
// (a float32 Cast of a low value, no Sub), P ⊙ (dP - r) alone reads and
// writes the low type, reading P and the product's low value; a float32
// value of its own there is left alone. SoftmaxGradTo sees the same in a
// graph built emulated, the product rounded by a Cast pair.
func TestLowSoftmaxGradsShifted(t *testing.T) {
	all := func(*graph.Node, dtype.DType) bool { return true }
	g := softmaxGradGraph(dtype.BFloat16, false, true)
	if n := LowSoftmaxGrads(g, dtype.BFloat16, all); n != 1 {
		t.Fatalf("rewrote %d, want 1", n)
	}
	g.Prune()
	var mul *graph.Node
	for _, n := range g.Nodes {
		if n.Op == "Mul" {
			mul = n
		}
		if n.Op == "Sub" {
			t.Errorf("a Sub was written: %s", n.Describe())
		}
	}
	if mul == nil || g.Info(mul.Output(0)).DType != dtype.BFloat16 || mul.Input(1) != "dp" || g.Info(mul.Input(0)).DType != dtype.BFloat16 {
		t.Errorf("not rewired: %v", mul.Describe())
	}
	if g := softmaxGradGraph(dtype.BFloat16, true, true); LowSoftmaxGrads(g, dtype.BFloat16, all) != 0 {
		t.Error("rewrote a product with a float32 value of its own")
	}

	// Emulated: P float32, the product's float32 value rounded by a pair.
	for _, tc := range []struct {
		name  string
		round dtype.DType
		want  bool
	}{{"rounded", dtype.BFloat16, true}, {"rounded to another type", dtype.Float16, false}} {
		g := graph.New("t", graph.EmitOpset)
		g.AddInput("s", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 4, 4}})
		g.AddInput("shifted", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 4, 4}})
		b := graph.NewBuilder(g, "")
		p := b.Op("Softmax", []string{"s"}, graph.AInt("axis", -1))
		mul := b.Mul(p, b.Cast(b.Cast("shifted", tc.round), dtype.Float32))
		g.Outputs = []string{b.Cast(mul, dtype.BFloat16)}
		producers := g.Producers()
		if got := SoftmaxGradTo(producers, g.Consumers(), g.OutputSet(), producers[mul], dtype.BFloat16); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
