package memplan_test

import (
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/memplan"
)

// TestReplayCountsLiveValues: a = exp(x) and s = sigmoid(a) are both held
// while the Add runs (a is read by it too, so the Sigmoid cannot write
// over it), the Add writes a new buffer (ONNX Runtime's CPU Add never
// works in place), and a Reshape is a view, not a copy.
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
	r := memplan.Replay(cg, nil, nil)
	if want := int64(3 * 3 * 10 * 4); r.Peak != want {
		t.Errorf("peak %d bytes, want %d", r.Peak, want)
	}
	if r.Order[r.PeakAt].Op != "Add" {
		t.Errorf("peak at %s, want the Add", r.Order[r.PeakAt].Describe())
	}
	if r.Inputs != 3*10*4 {
		t.Errorf("inputs %d bytes, want %d", r.Inputs, 3*10*4)
	}
	if len(r.Live) != 3 || r.Live[0].Bytes != 120 {
		t.Errorf("live at the peak: %+v", r.Live)
	}
	if _, err := memplan.Concrete(g, map[string]int64{}); err == nil {
		t.Error("a symbolic dimension without a value was accepted")
	}
}

// TestConcreteSizesFromShapes: a size the batch fixes only through a Shape
// node (an L1 loss's gradient, Expand to Shape(x)) is known once the batch
// is given, at batch 1 too, where broadcasting against a 1 could not tell
// an unknown size from 1 (the VQ-GAN's gradients stayed unknown there and
// plan priced its convolutions at a fraction of their work).
func TestConcreteSizesFromShapes(t *testing.T) {
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 1, 4}})
	g.Dims["x"] = []string{"batch", "", ""}
	b := graph.NewBuilder(g, "")
	e := b.Op("Expand", []string{b.Scalar(ort.Float32, 0.5), b.Shape("x")})
	y := b.Mul(e, b.Op("Sign", []string{"x"}))
	g.Outputs = []string{b.ReduceSum(y, true, 1)}
	g.FoldShapes()
	for _, batch := range []int64{1, 3} {
		cg, err := memplan.Concrete(g, map[string]int64{"batch": batch})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{e, y, g.Outputs[0]} {
			if info := cg.Info(v); !info.Static() || info.Shape[0] != batch {
				t.Errorf("batch %d: %s is %v, want its batch known", batch, v, info.Shape)
			}
		}
	}
}

// TestReplayPlansBuffersAsONNXRuntime: a Relu writes over its dying input;
// a buffer whose value died stays allocated until a later value of its
// shape that took it over dies; a Transpose read by one MatMul is folded
// into it and takes nothing.
func TestReplayPlansBuffersAsONNXRuntime(t *testing.T) {
	const u = 4 * 8 * 4 // bytes of a [4, 8] float32
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{4, 8}})
	b := graph.NewBuilder(g, "")
	a := b.Neg("x")                // A, new
	r := b.Relu(a)                 // in A: a dies here
	w := b.Concat(0, r, r)         // W [8, 8], new; r dies: A free
	s := b.ReduceSum(w, true, 0)   // S [1, 8], new; W dies
	c := b.Neg(b.ExpandLike(s, a)) // Expand takes A back, the Neg a new buffer
	tr := b.Transpose(c, 1, 0)     // folded into the MatMul
	g.Outputs = []string{b.ReduceSum(b.MatMul(c, tr), false)}
	r0 := memplan.Replay(g, nil, nil)
	at := map[string]int64{}
	for i, n := range r0.Order {
		at[n.Op] = max(at[n.Op], r0.Trace[i])
	}
	if at["Relu"] != u {
		t.Errorf("held at the Relu %d bytes, want %d (it writes over its input)", at["Relu"], u)
	}
	// While the ReduceSum runs, W and S are live and A is held for the
	// Expand.
	if want := int64(u + 2*u + 8*4); at["ReduceSum"] != want {
		t.Errorf("held at the ReduceSum %d bytes, want %d (A kept for its next value)", at["ReduceSum"], want)
	}
	if want := int64(u + 4*4*4); at["MatMul"] != want {
		t.Errorf("held at the MatMul %d bytes, want %d (the transposed copy folded into it)", at["MatMul"], want)
	}

	// A weight (a graph input) transposed for its MatMul takes nothing
	// either.
	gw := graph.New("w", graph.EmitOpset)
	gw.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{4, 8}})
	gw.AddInput("W", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{6, 8}})
	bw := graph.NewBuilder(gw, "")
	gw.Outputs = []string{bw.ReduceSum(bw.MatMul("x", bw.Transpose("W", 1, 0)), false)}
	if r := memplan.Replay(gw, nil, nil); r.Peak != 4*6*4 {
		t.Errorf("peak %d bytes with a transposed weight, want %d (the MatMul's output alone)", r.Peak, 4*6*4)
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
