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
	g.RunFirst([]string{loss, stat, a})
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
