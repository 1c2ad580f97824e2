package cudaform

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/graph"
)

// TestSplitPads: the Pads CUDA's general kernel would run (a volume padded
// on D, H and W, NCHW transposed to [C, H, W, N] padded on H and W, a
// volume padded on W alone, with a pad value) become fast Pads over
// views, with the same values; those its fast kernel takes as they are
// (NCHW on H and W, [N, C, L] on L) are left alone.
func TestSplitPads(t *testing.T) {
	orttest.Init(t)
	type pad struct {
		shape, run []int64 // run: the shape fed (shape may leave the batch unfixed)
		pads       []int64
		value      bool
		rewritten  bool
	}
	cases := []pad{
		{[]int64{-1, 3, 4, 5, 6}, []int64{2, 3, 4, 5, 6}, []int64{0, 0, 1, 1, 1, 0, 0, 1, 1, 1}, false, true},
		{[]int64{3, 5, 6, 2}, nil, []int64{0, 1, 1, 0, 0, 2, 1, 0}, false, true},
		{[]int64{-1, 3, 4, 5, 6}, []int64{2, 3, 4, 5, 6}, []int64{0, 0, 0, 0, 2, 0, 0, 0, 0, 1}, true, true},
		{[]int64{-1, 3, 5, 6}, []int64{2, 3, 5, 6}, []int64{0, 0, 1, 1, 0, 0, 1, 1}, false, false},
		{[]int64{-1, 3, 7}, []int64{2, 3, 7}, []int64{0, 0, 2, 0, 0, 1}, false, false},
	}
	g := graph.New("pads", graph.EmitOpset)
	b := graph.NewBuilder(g, "")
	var want int
	for i, c := range cases {
		in := "x" + string(rune('0'+i))
		g.AddInput(in, graph.Info{DType: dtype.Float32, Known: true, Shape: c.shape})
		args := []string{in, b.Ints(c.pads...)}
		if c.value {
			args = append(args, b.Scalar(dtype.Float32, 0.5))
		}
		g.Outputs = append(g.Outputs, b.Op("Pad", args))
		if c.rewritten {
			want++
		}
	}
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	plain := g.Clone()
	if n := SplitPads(g); n != want {
		t.Errorf("%d Pads rewritten, want %d", n, want)
	}
	for _, n := range g.Nodes {
		if n.Op != "Pad" {
			continue
		}
		x := g.Info(n.Input(0))
		p, _ := g.ConstInts(n.Input(1))
		var padded []int
		for a := range x.Rank() {
			if p[a] != 0 || p[x.Rank()+a] != 0 {
				padded = append(padded, a)
			}
		}
		if !fastPad(x.Rank(), padded) {
			t.Errorf("Pad %s of %v on axes %v: not the fast kernel's", n.Name, x.Shape, padded)
		}
	}
	for i, o := range g.Outputs {
		if a, b := plain.Info(o), g.Info(o); !slices.Equal(a.Shape, b.Shape) {
			t.Errorf("output %d shape %v, was %v", i, b.Shape, a.Shape)
		}
	}
	shapes := map[string][]int64{}
	for i, in := range g.Inputs {
		shapes[in] = cases[i].run
		if shapes[in] == nil {
			shapes[in] = cases[i].shape
		}
	}
	feed := randomFeed(t, rand.New(rand.NewPCG(5, 6)), shapes)
	want2, got := run(t, plain, feed), run(t, g, feed)
	for i := range want2 {
		if !slices.Equal(want2[i], got[i]) {
			t.Errorf("output %d differs from the plain Pad's", i)
		}
	}
}
