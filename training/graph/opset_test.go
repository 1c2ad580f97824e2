package graph

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
)

// TestDowngrade: a graph at opset 20 with the ops whose versions 19 and 20
// changed (Equal, ConstantOfShape, Pad, Cast, GridSample, Gelu; the
// reductions' axes inputs of 18) is written at opset 18 computing the same
// values on ONNX Runtime's CPU provider: GridSample's mode by its old name,
// Gelu as com.microsoft's. One node using what opset 18 lacks refuses the
// whole graph, naming that node, and leaves it as it was.
func TestDowngrade(t *testing.T) {
	orttest.Init(t)
	build := func(extra func(b *Builder, x string) string) *Graph {
		g := New("t", 20)
		g.AddInput("x", Info{DType: dtype.Float32, Known: true, Shape: []int64{1, 2, 4, 4}})
		b := NewBuilder(g, "")
		gelu := b.Op("Gelu", []string{"x"})
		mask := b.Cast(b.Equal(b.Op("Floor", []string{"x"}), b.ScalarLike("x", 0)), dtype.Float32)
		zeros := b.Op("ConstantOfShape", []string{b.Shape("x")})
		padded := b.Op("Pad", []string{"x", b.Ints(0, 0, 1, 1, 0, 0, 1, 1)})
		grid := b.Mul(b.Op("Tanh", []string{b.Transpose(b.Slice("x", []int64{0}, []int64{2}, []int64{1}, nil), 0, 2, 3, 1)}), b.ScalarLike("x", 0.9))
		sampled := b.Op("GridSample", []string{padded, grid}, AString("mode", "linear"), AInt("align_corners", 0))
		mean := b.ReduceMean(b.Add(b.Mul(gelu, mask), zeros), true, 2, 3)
		out := b.Add(b.ReduceMean(sampled, true, 2, 3), mean)
		if extra != nil {
			out = b.Add(out, b.ReduceSum(extra(b, "x"), true, 1, 2, 3))
		}
		g.Outputs = []string{out}
		if b.Err != nil {
			t.Fatal(b.Err)
		}
		return g
	}
	x := make([]float32, 32)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*1.3)) * 2
	}
	feed, err := ort.NewTensor([]int64{1, 2, 4, 4}, x)
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	run := func(g *Graph) []float32 {
		return orttest.RunFloat32(t, g, map[string]*ort.Value{"x": feed}, g.Outputs[0])[0]
	}
	g := build(nil)
	want := run(g)
	if err := g.Downgrade(CUDAOpset); err != nil {
		t.Fatal(err)
	}
	if g.Opset != CUDAOpset {
		t.Fatalf("opset %d after, want %d", g.Opset, CUDAOpset)
	}
	for _, n := range g.Nodes {
		if n.Op == "Gelu" && n.Domain != MSDomain || n.Op == "GridSample" && n.String("mode", "") != "bilinear" {
			t.Errorf("%s not rewritten: %v", n.Describe(), n.Attrs)
		}
	}
	got := run(g)
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-6*(1+math.Abs(float64(want[i]))) {
			t.Errorf("output %d: %g at opset 18, %g at 20", i, got[i], want[i])
		}
	}

	for _, tc := range []struct {
		name, why string
		node      func(b *Builder, x string) string
	}{
		{"tanh Gelu", "opset 20", func(b *Builder, x string) string {
			return b.Op("Gelu", []string{x}, AString("approximate", "tanh"))
		}},
		{"wrap Pad", "wrap mode", func(b *Builder, x string) string {
			return b.Op("Pad", []string{x, b.Ints(0, 0, 1, 1, 0, 0, 1, 1)}, AString("mode", "wrap"))
		}},
		{"saturating Cast", "saturate", func(b *Builder, x string) string {
			return b.Cast(b.Op("Cast", []string{x}, AInt("to", int64(dtype.Float16)), AInt("saturate", 1)), dtype.Float32)
		}},
	} {
		g := build(tc.node)
		nodes := len(g.Nodes)
		err := g.Downgrade(CUDAOpset)
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: %v, want a refusal naming %q", tc.name, err, tc.why)
		}
		if g.Opset != 20 || len(g.Nodes) != nodes || g.Nodes[0].Domain != "" {
			t.Errorf("%s: the refused graph changed (opset %d)", tc.name, g.Opset)
		}
	}
}

// TestStandardGelus: ONNX Runtime's Gelu is written as the elementary
// chain at opset 17 and as ONNX's Gelu at 20, the same values on the CPU
// provider, and the graph no longer imports com.microsoft.
func TestStandardGelus(t *testing.T) {
	orttest.Init(t)
	x := make([]float32, 12)
	for i := range x {
		x[i] = float32(i)/3 - 2
	}
	feed, err := ort.NewTensor([]int64{3, 4}, x)
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	for _, opset := range []int64{17, 20} {
		g := New("t", opset)
		g.Domains[MSDomain] = 1
		g.AddInput("x", Info{DType: dtype.Float32, Known: true, Shape: []int64{3, 4}})
		g.AddNode(&Node{Op: "Gelu", Domain: MSDomain, Name: "gelu", Inputs: []string{"x"}, Outputs: []string{"y"}})
		g.Outputs = []string{"y"}
		want := orttest.RunFloat32(t, g, map[string]*ort.Value{"x": feed}, "y")[0]
		if n := g.StandardGelus(); n != 1 {
			t.Fatalf("opset %d: rewrote %d, want 1", opset, n)
		}
		if _, ok := g.Domains[MSDomain]; ok || slices.ContainsFunc(g.Nodes, func(n *Node) bool { return n.Domain != "" }) {
			t.Errorf("opset %d: com.microsoft left in the graph", opset)
		}
		if gelus := g.CountOp("Gelu"); (gelus == 1) != (opset >= 20) {
			t.Errorf("opset %d: %d Gelu nodes", opset, gelus)
		}
		got := orttest.RunFloat32(t, g, map[string]*ort.Value{"x": feed}, "y")[0]
		for i := range want {
			if math.Abs(float64(got[i]-want[i])) > 1e-6*(1+math.Abs(float64(want[i]))) {
				t.Errorf("opset %d: y[%d] %g, want %g", opset, i, got[i], want[i])
			}
		}
	}
}
