package graph

import (
	"slices"
	"testing"

	"github.com/ortrain/ortrain/ort"
)

// TestFastReduceSplit: per-channel axes of NCHW (and the like) split into
// a leading and a trailing run, which ONNX Runtime's CUDA provider reduces
// with its own kernel; one run, a gap or an unknown rank do not split.
func TestFastReduceSplit(t *testing.T) {
	r4 := Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 8, 4, 4}}
	for _, tc := range []struct {
		axes        []int64
		info        Info
		lead, trail []int64
	}{
		{[]int64{0, 2, 3}, r4, []int64{0}, []int64{2, 3}},
		{[]int64{3, 0, -2}, r4, []int64{0}, []int64{2, 3}},
		{[]int64{0, 3}, r4, []int64{0}, []int64{3}},
		{[]int64{0, 1, 3}, r4, []int64{0, 1}, []int64{3}},
		{[]int64{0, 2, 2, 3}, r4, []int64{0}, []int64{2, 3}},
		{[]int64{0, 2}, r4, nil, nil}, // a gap before the last axis
		{[]int64{1, 3}, r4, nil, nil}, // a gap after the first
		{[]int64{0, 1}, r4, nil, nil}, // one leading run: fast already
		{[]int64{2, 3}, r4, nil, nil}, // one trailing run
		{[]int64{1, 2}, r4, nil, nil}, // one inner run: no split helps
		{[]int64{0, 1, 2, 3}, r4, nil, nil},
		{[]int64{0, 2, 3}, Info{DType: ort.Float32}, nil, nil}, // rank unknown
		{[]int64{0, 5}, r4, nil, nil},                          // out of range
	} {
		lead, trail, ok := FastReduceSplit(tc.axes, tc.info)
		if ok != (tc.lead != nil) || !slices.Equal(lead, tc.lead) || !slices.Equal(trail, tc.trail) {
			t.Errorf("FastReduceSplit(%v, %v) = %v, %v, %v; want %v, %v", tc.axes, tc.info.Shape, lead, trail, ok, tc.lead, tc.trail)
		}
	}
}

// TestReducePerChannel: the builder writes a per-channel sum or mean of
// an NCHW map as two reductions (spatial axes, then the batch) with the
// shape the one reduction has, keepdims or not; a ReduceMax stays one
// node (cuDNN runs every ReduceMax, split or not).
func TestReducePerChannel(t *testing.T) {
	for _, keep := range []bool{true, false} {
		g := New("t", EmitOpset)
		g.AddInput("x", Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 8, 4, 4}})
		b := NewBuilder(g, "")
		s := b.ReduceSum("x", keep, 0, 2, 3)
		m := b.ReduceMean("x", keep, 0, 2, 3)
		mx := b.ReduceMax("x", keep, 0, 2, 3)
		if b.Err != nil {
			t.Fatal(b.Err)
		}
		want := []int64{8}
		if keep {
			want = []int64{1, 8, 1, 1}
		}
		for _, v := range []string{s, m, mx} {
			if got := g.Info(v).Shape; !slices.Equal(got, want) {
				t.Errorf("keep %v: %s has shape %v, want %v", keep, v, got, want)
			}
		}
		var axes [][]int64
		ops := map[string]int{}
		for _, n := range g.Nodes {
			if a, ok := g.ReduceAxes(n); ok {
				ops[n.Op]++
				if n.Op != "ReduceMax" {
					axes = append(axes, a)
				}
			}
		}
		if ops["ReduceSum"] != 2 || ops["ReduceMean"] != 2 || ops["ReduceMax"] != 1 {
			t.Errorf("keep %v: reductions %v, want 2 ReduceSum, 2 ReduceMean, 1 ReduceMax", keep, ops)
		}
		for i, a := range axes {
			want := []int64{2, 3}
			if i%2 == 1 {
				want = []int64{0}
			}
			if !slices.Equal(a, want) {
				t.Errorf("keep %v: reduction %d over %v, want %v", keep, i, a, want)
			}
		}
	}
}
