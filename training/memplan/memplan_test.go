package memplan_test

import (
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/memplan"
)

// TestReplayCountsLiveValues: a = exp(x) and s = sigmoid(a) are both held
// while the sigmoid runs (a is read again by the Add), the Add writes over
// a, which dies there, and a Reshape is a view, not a copy.
func TestReplayCountsLiveValues(t *testing.T) {
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 10}})
	g.Dims["x"] = []string{"batch", ""}
	b := graph.NewBuilder(g, "")
	a := b.Exp("x")
	s := b.Sigmoid(a)
	c := b.Reshape(b.Add(a, s), b.Ints(-1))
	g.Outputs = []string{b.ReduceSum(c, false)}
	cg, err := memplan.Concrete(g, map[string]int64{"batch": 3})
	if err != nil {
		t.Fatal(err)
	}
	r := memplan.Replay(cg, nil)
	if want := int64(2 * 3 * 10 * 4); r.Peak != want {
		t.Errorf("peak %d bytes, want %d", r.Peak, want)
	}
	if r.Order[r.PeakAt].Op != "Sigmoid" {
		t.Errorf("peak at %s, want the Sigmoid", r.Order[r.PeakAt].Describe())
	}
	if r.Inputs != 3*10*4 {
		t.Errorf("inputs %d bytes, want %d", r.Inputs, 3*10*4)
	}
	if len(r.Live) != 2 || r.Live[0].Bytes != 120 {
		t.Errorf("live at the peak: %+v", r.Live)
	}
	if _, err := memplan.Concrete(g, map[string]int64{}); err == nil {
		t.Error("a symbolic dimension without a value was accepted")
	}
}

// TestOrderIsDepthFirstFromTheLastLeaf: ONNX Runtime's default order runs
// the last leaf's ancestors first, each node's higher-numbered producers
// before the lower ones.
func TestOrderIsDepthFirstFromTheLastLeaf(t *testing.T) {
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{4}})
	b := graph.NewBuilder(g, "")
	p := b.Neg("x")   // node 0
	q := b.Exp("x")   // node 1
	l1 := b.Abs(p)    // node 2: a leaf
	l2 := b.Add(p, q) // node 3: the last leaf
	g.Outputs = []string{l1, l2}
	var got []string
	for _, n := range memplan.Order(g) {
		got = append(got, n.Op)
	}
	want := []string{"Exp", "Neg", "Add", "Abs"}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
}
