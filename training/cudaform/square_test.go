package cudaform

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/graph"
)

// TestFuseSquares: BatchNorm's variance over x [N, C, H, W], its batch not
// fixed, a mean of squares over the last axis and one over a fixed axis
// and the batch after it, dropped, become sums of squares (the first and
// last finished by a mean over the batch); a square something else reads
// stays. The outputs agree with the plain graph's to float32
// rounding, and after Rewrite every reduction takes the CUDA provider's
// own kernel.
func TestFuseSquares(t *testing.T) {
	orttest.Init(t)
	build := func() *graph.Graph {
		g := graph.New("squares", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{-1, 8, 24, 24}})
		g.AddInput("y", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{5, -1, 6}})
		b := graph.NewBuilder(g, "")
		d := b.Sub("x", b.ReduceMean("x", true, 0, 2, 3))
		variance := b.ReduceMean(b.Mul(d, d), false, 0, 2, 3)
		rows := b.ReduceMean(b.Mul("x", "x"), true, 3)
		shared := b.Mul(d, d)
		kept := b.Add(b.ReduceMean(shared, true, 1), shared)
		// The batch after a dropped axis: it becomes axis 0.
		after := b.ReduceMean(b.Mul("y", "y"), false, 0, 1)
		if b.Err != nil {
			t.Fatal(b.Err)
		}
		g.Outputs = []string{variance, rows, kept, after}
		return g
	}
	plain, g := build(), build()
	if n := FuseSquares(g); n != 3 {
		t.Errorf("%d means of squares fused, want 3", n)
	}
	muls := 0
	for _, n := range g.Nodes {
		if n.Op == "Mul" && n.Input(0) == n.Input(1) {
			muls++
		}
	}
	if muls != 1 {
		t.Errorf("%d squares left, want 1 (read twice)", muls)
	}
	SplitReductions(g)
	for i, o := range g.Outputs {
		if a, b := plain.Info(o), g.Info(o); !slices.Equal(a.Shape, b.Shape) {
			t.Errorf("output %d shape %v, was %v", i, b.Shape, a.Shape)
		}
	}
	for _, n := range g.Nodes {
		if _, ok := secondStage[n.Op]; ok && !FastReduce(g, n) && n.Input(0) != "" {
			if axes, _ := g.ReduceAxes(n); len(axes) != 1 || axes[0] != 1 {
				t.Errorf("%s %s over %v left for cuDNN", n.Op, n.Name, axes)
			}
		}
	}
	feed := randomFeed(t, rand.New(rand.NewPCG(5, 6)), map[string][]int64{"x": {3, 8, 24, 24}, "y": {5, 4, 6}})
	want, got := run(t, plain, feed), run(t, g, feed)
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Errorf("output %d has %d values, the plain graph's %d", i, len(got[i]), len(want[i]))
			continue
		}
		worst := 0.0
		for j := range want[i] {
			worst = max(worst, math.Abs(float64(got[i][j]-want[i][j]))/max(1, math.Abs(float64(want[i][j]))))
		}
		if worst > 1e-5 {
			t.Errorf("output %d differs by %g (relative) from the plain graph's", i, worst)
		}
	}
}
