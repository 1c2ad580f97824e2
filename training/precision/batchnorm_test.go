package precision

import (
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

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
			for i := 1; i < 5; i++ {
				if dt := g.Info(bn.Input(i)).DType; dt != tc.low {
					t.Errorf("%s: input %d is %v", bn.Describe(), i, dt)
				}
			}
			if dt := g.Info(bn.Output(0)).DType; dt != tc.low {
				t.Errorf("%s writes %v", bn.Describe(), dt)
			}
			casts := 0
			for _, n := range g.Nodes {
				if n.Op == "Cast" {
					casts++
				}
				if n.Op == "Relu" && n.Input(0) != bn.Output(0) {
					t.Errorf("%s does not read the BatchNorm's output", n.Describe())
				}
			}
			if casts != 1 {
				t.Errorf("%d Casts, want 1 (the per-channel inputs together)", casts)
			}
		})
	}
}
