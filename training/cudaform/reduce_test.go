package cudaform

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/graph"
)

// reductions is a graph of the reductions a BatchNorm and its gradient
// write over x [N, C, H, W], its batch not fixed: per-channel statistics
// kept and dropped, a sum of squares, a reduction the CUDA provider already
// runs fast and one it cannot be helped with (channels only).
func reductions(t *testing.T, opset int64, shape []int64) *graph.Graph {
	t.Helper()
	g := graph.New("reductions", opset)
	g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: shape})
	b := graph.NewBuilder(g, "")
	mean := b.ReduceMean("x", true, 0, 2, 3)
	sum := b.ReduceSum("x", false, 0, 2, 3)
	var sq string
	if opset >= 18 {
		sq = b.Op("ReduceSumSquare", []string{"x", b.Ints(0, 2, 3)}, graph.AInt("keepdims", 0))
	} else {
		sq = b.Op("ReduceSumSquare", []string{"x"}, graph.AInt("keepdims", 0), graph.AInts("axes", []int64{0, 2, 3}))
	}
	spatial := b.ReduceSum("x", true, 2, 3)
	channels := b.ReduceSum("x", false, 1)
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	g.Outputs = []string{mean, sum, sq, spatial, channels}
	return g
}

// randomFeed is a float32 tensor of normal values (mean 0.5) per input,
// closed when the test ends.
func randomFeed(t *testing.T, r *rand.Rand, shapes map[string][]int64) map[string]*ort.Value {
	t.Helper()
	feed := map[string]*ort.Value{}
	for in, shape := range shapes {
		v := make([]float32, ort.Numel(shape))
		for i := range v {
			v[i] = float32(r.NormFloat64() + 0.5)
		}
		val, err := ort.NewTensor(shape, v)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(val.Close)
		feed[in] = val
	}
	return feed
}

// run runs g on the CPU provider and returns its outputs.
func run(t *testing.T, g *graph.Graph, feed map[string]*ort.Value) [][]float32 {
	t.Helper()
	return orttest.RunFloat32(t, g, feed, g.Outputs...)
}

// TestSplitReductions: the per-channel reductions of a large tensor become
// two reductions the CUDA provider runs with its own kernel, the others
// stay; the outputs agree with the unsplit graph's to float32 rounding and
// keep their shapes, at ortrain's opset (axes as attributes) and at 18
// (axes as inputs).
func TestSplitReductions(t *testing.T) {
	orttest.Init(t)
	shape := []int64{4, 8, 48, 48}
	for _, opset := range []int64{graph.EmitOpset, 18} {
		plain, g := reductions(t, opset, []int64{-1, 8, 48, 48}), reductions(t, opset, []int64{-1, 8, 48, 48})
		if n := SplitReductions(g); n != 3 {
			t.Errorf("opset %d: %d reductions split, want 3 (mean, sum and sum of squares over {0, 2, 3})", opset, n)
		}
		slow := 0
		for _, n := range g.Nodes {
			if !FastReduce(g, n) {
				slow++
			}
		}
		if slow != 1 {
			t.Errorf("opset %d: %d reductions left for cuDNN, want 1 (over the channels)", opset, slow)
		}
		for i, o := range g.Outputs {
			if a, b := plain.Info(o), g.Info(o); !slices.Equal(a.Shape, b.Shape) {
				t.Errorf("opset %d: output %d shape %v, was %v", opset, i, b.Shape, a.Shape)
			}
		}
		feed := randomFeed(t, rand.New(rand.NewPCG(3, uint64(opset))), map[string][]int64{"x": shape})
		want, got := run(t, plain, feed), run(t, g, feed)
		for i := range want {
			worst := 0.0
			for j := range want[i] {
				worst = max(worst, math.Abs(float64(got[i][j]-want[i][j]))/max(1, math.Abs(float64(want[i][j]))))
			}
			if worst > 1e-5 || len(got[i]) != len(want[i]) {
				t.Errorf("opset %d: output %d differs by %g (relative) from the unsplit graph's", opset, i, worst)
			}
		}
	}
}

// TestSplitReductionsLeavesLowTypes: a float16 reduction stays whole (its
// partial sums would be rounded to float16).
func TestSplitReductionsLeavesLowTypes(t *testing.T) {
	g := graph.New("half", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: dtype.Float16, Known: true, Shape: []int64{4, 8, 48, 48}})
	b := graph.NewBuilder(g, "")
	g.Outputs = []string{b.ReduceSum("x", false, 0, 2, 3)}
	if n := SplitReductions(g); n != 0 || len(g.Nodes) != 1 {
		t.Errorf("%d split, %d nodes; want the float16 reduction left whole", n, len(g.Nodes))
	}
}

// TestSplitReductionsUnitAxes: the CUDA provider sets a reduction's axes
// of size 1 aside before it picks its kernel, so a sum of row statistics
// [N, C, 1, 1] over {0, 2, 3} is its own kernel's, [N, C] over {0}, and
// stays whole; over {0, 2, 3} of [N, C, 1, 4] it is not.
func TestSplitReductionsUnitAxes(t *testing.T) {
	for _, tc := range []struct {
		shape []int64
		fast  bool
	}{{[]int64{-1, 8, 1, 1}, true}, {[]int64{-1, 8, 1, 4}, false}, {[]int64{1, 8, 1, 1}, true}} {
		g := graph.New("unit", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: tc.shape})
		b := graph.NewBuilder(g, "")
		g.Outputs = []string{b.ReduceSum("x", false, 0, 2, 3)}
		if fast := FastReduce(g, g.Nodes[len(g.Nodes)-1]); fast != tc.fast {
			t.Errorf("%v: FastReduce %v, want %v", tc.shape, fast, tc.fast)
		}
		if n := SplitReductions(g); (n == 0) != tc.fast {
			t.Errorf("%v: %d split", tc.shape, n)
		}
	}
}
