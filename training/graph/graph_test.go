package graph

import (
	"slices"
	"testing"

	"github.com/ortrain/ortrain/ort"
)

// TestRunFirst: leaf nodes named move to the end of the node list, the
// first named last (ONNX Runtime starts from the last leaf); a node whose
// output another reads stays where it is.
func TestRunFirst(t *testing.T) {
	g := New("t", EmitOpset)
	g.AddInput("x", Info{DType: ort.Float32, Known: true, Shape: []int64{2}})
	b := NewBuilder(g, "")
	a := b.Relu("x")
	loss := b.Neg(a)
	stat := b.Abs("x")
	c := b.Exp(a)
	g.Outputs = []string{loss, stat, c, a}
	g.RunFirst([]string{loss, stat, a, loss}) // named twice: its first place counts
	var got []string
	for _, n := range g.Nodes {
		got = append(got, n.Outputs[0])
	}
	if want := []string{a, c, stat, loss}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	if err := g.Sort(); err != nil {
		t.Fatal(err)
	}
}

// TestFoldShapes: the shape arithmetic an exporter emits for
// x.reshape(x.shape[0], -1) folds to a constant when x's size is known,
// and the Shape node no longer reads x; with the batch free it stays.
func TestFoldShapes(t *testing.T) {
	for _, batch := range []int64{4, -1} {
		g := New("t", EmitOpset)
		g.AddInput("x", Info{DType: ort.Float32, Known: true, Shape: []int64{batch, 3, 5}})
		b := NewBuilder(g, "")
		n := b.Op("Gather", []string{b.Shape("x"), b.Const(Int64s("", nil, []int64{0}))}, AInt("axis", 0))
		shape := b.Op("Concat", []string{b.Unsqueeze(n, 0), b.Ints(-1)}, AInt("axis", 0))
		y := b.Reshape("x", shape)
		g.Outputs = []string{y}
		folded := g.FoldShapes()
		if batch < 0 {
			if folded != 0 {
				t.Errorf("free batch: %d nodes folded", folded)
			}
			continue
		}
		v, ok := g.ConstInts(shape)
		if !ok || !slices.Equal(v, []int64{4, -1}) || folded != 4 {
			t.Errorf("shape %v (%v), %d folded; want constant [4 -1], 4 folded", v, ok, folded)
		}
		for _, nd := range g.Nodes {
			if nd.Op == "Shape" {
				t.Errorf("a Shape node is left: %v", nd.Inputs)
			}
		}
		if info := g.Info(y); !slices.Equal(info.Shape, []int64{4, 15}) {
			t.Errorf("reshaped to %v, want [4 15]", info)
		}
	}
}
