package graph

import (
	"math"
	"slices"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/onnxpb"
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

// TestFoldShapesThroughTheBatch: with the batch size free, what exporters
// compute from other sizes still folds, and a reshape whose target reads
// the batch from one tensor and reshapes another resolves its -1 when the
// two batches are provably the same dimension (a channel shuffle), and
// only then.
func TestFoldShapesThroughTheBatch(t *testing.T) {
	g := New("t", EmitOpset)
	g.AddInput("x", Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 8, 2, 2}})
	g.AddInput("z", Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 3}})
	b := NewBuilder(g, "")
	dim := func(v string, i int64) string {
		return b.Op("Gather", []string{b.Shape(v), b.Const(Int64s("", nil, []int64{i}))}, AInt("axis", 0))
	}
	cat := func(parts ...string) string { return b.Op("Concat", parts, AInt("axis", 0)) }
	n := b.Unsqueeze(dim("x", 0), 0)
	groups := b.Unsqueeze(b.Op("Div", []string{dim("x", 1), b.Const(Int64s("", nil, []int64{2}))}), 0)
	r := b.Op("Relu", []string{"x"})
	split := b.Reshape(r, cat(n, b.Ints(2), groups, b.Ints(2, 2)))
	shuffled := b.Reshape(b.Transpose(split, 0, 2, 1, 3, 4), cat(n, b.Ints(-1, 2, 2)))
	other := b.Reshape("x", cat(b.Unsqueeze(dim("z", 0), 0), b.Ints(-1)))
	// (4 - W % 4) % 4, the padding to a multiple of 4 a window partition
	// computes, is known although the batch is not.
	four := b.Const(Int64s("", nil, []int64{4}))
	pad := b.Op("Mod", []string{b.Op("Sub", []string{four, b.Op("Mod", []string{dim("x", 3), four})}), four})
	// Pads reversed pairwise by a negative-step Slice, as torch exports F.pad.
	pairs := b.Reshape(b.Ints(0, 1, 2, 3), b.Ints(-1, 2))
	rev := b.Slice(pairs, []int64{-1}, []int64{math.MinInt64 + 1}, []int64{0}, []int64{-1})
	pads := b.Reshape(b.Transpose(rev, 1, 0), b.Ints(-1))
	g.Outputs = []string{shuffled, other, pad, pads}
	g.FoldShapes()

	if info := g.Info(split); !slices.Equal(info.Shape, []int64{-1, 2, 4, 2, 2}) {
		t.Errorf("split into groups: %v, want [? 2 4 2 2]", info)
	}
	if info := g.Info(shuffled); !slices.Equal(info.Shape, []int64{-1, 8, 2, 2}) {
		t.Errorf("shuffled back: %v, want [? 8 2 2]", info)
	}
	if info := g.Info(other); !slices.Equal(info.Shape, []int64{-1, -1}) {
		t.Errorf("reshaped by another input's batch: %v, want [? ?] (nothing ties the two batches)", info)
	}
	if v, ok := g.ConstInts(pad); !ok || !slices.Equal(v, []int64{2}) {
		t.Errorf("padding %v (constant %v), want 2", v, ok)
	}
	if v, ok := g.ConstInts(pads); !ok || !slices.Equal(v, []int64{2, 0, 3, 1}) {
		t.Errorf("reversed pads %v (constant %v), want [2 0 3 1]", v, ok)
	}
}

// TestFoldShapesKeepsParameters: a Concat of Constant nodes' floats (a
// Resize's scales) folds, a Concat of initializers (an RNN's two biases,
// which train) does not.
func TestFoldShapesKeepsParameters(t *testing.T) {
	g := New("t", EmitOpset)
	g.AddInitializer(Float32s("bias_ih", []int64{2}, []float32{1, 2}))
	g.AddInitializer(Float32s("bias_hh", []int64{2}, []float32{3, 4}))
	b := NewBuilder(g, "")
	params := b.Concat(0, "bias_ih", "bias_hh")
	constant := func(name string, v ...float32) string {
		g.AddNode(&Node{Op: "Constant", Name: name, Outputs: []string{name}, Attrs: []*Attr{ATensor("value", Float32s("", []int64{int64(len(v))}, v))}})
		return name
	}
	scales := b.Concat(0, constant("roi_scales", 1, 1), constant("hw_scales", 2, 2))
	g.Outputs = []string{params, scales}
	g.FoldShapes()
	if _, ok := g.Const(params); ok {
		t.Error("the Concat of two initializers was folded into a constant: they would no longer train")
	}
	if _, ok := g.Const(scales); !ok {
		t.Error("the Concat of constant scales was not folded")
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

// TestSameDimThroughSlice: a Slice keeps the batch of the axes it does not
// cut (one half of a sequence, or of the heads' width, has the batch of
// the whole); a Slice along the batch does not.
func TestSameDimThroughSlice(t *testing.T) {
	g := New("t", EmitOpset)
	g.AddInput("x", Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4, 8}})
	b := NewBuilder(g, "")
	half := b.Slice("x", []int64{4}, []int64{8}, []int64{-1}, nil)
	firstRows := b.Slice("x", []int64{0}, []int64{2}, nil, nil) // no axes: the first axis
	g.Outputs = []string{half, firstRows}
	g.FoldShapes()
	if !g.SameDim(half, 0, "x", 0) {
		t.Errorf("the half along the last axis: its batch %v is not known to be x's", g.Info(half))
	}
	if g.SameDim(firstRows, 0, "x", 0) {
		t.Errorf("two rows of the batch are said to be the whole batch")
	}
}

// TestTraceDimsThroughTheBackward: in a graph built without FoldShapes (a
// gradient graph), TraceDims matches the batch through a Reshape whose -1
// is the batch (the other sizes multiply to the same on both sides), a
// reduction that keeps it, a Sum of values that share it, and a Pad of
// other axes of two inputs whose batch has the same name; a reshape that
// splits the batch and an input whose size is its own stay unmatched.
// Sizes broadcast from the same unrelated sizes match each other.
func TestTraceDimsThroughTheBackward(t *testing.T) {
	g := New("t", EmitOpset)
	g.AddInput("x", Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4, 6}})
	g.AddInput("other", Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4, 1}})
	b := NewBuilder(g, "")
	g.AddInput("y", Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4, 6}})
	g.Dims["x"], g.Dims["y"] = []string{"batch", "", ""}, []string{"batch", "", ""}
	heads := b.Reshape("x", b.Ints(-1, 4, 2, 3))
	rows := b.ReduceSum(heads, true, 2, 3)
	sum := b.Sum(b.Neg(heads), heads)
	split := b.Reshape("x", b.Ints(-1, 2, 4, 6))
	both := b.Add(b.Op("Pad", []string{"x", b.Ints(0, 1, 0, 0, 2, 0)}), b.Op("Pad", []string{"y", b.Ints(0, 1, 0, 0, 2, 0)}))
	g.Outputs = []string{rows, sum, split, both}
	g.TraceDims()
	for _, v := range []string{heads, rows, sum, both} {
		if !g.SameDim(v, 0, "x", 0) {
			t.Errorf("%s %v: its batch is not known to be x's", v, g.Info(v).Shape)
		}
	}
	if g.SameDim(split, 0, "x", 0) {
		t.Errorf("half the batch is said to be the batch")
	}
	if g.SameDim("other", 0, "x", 0) {
		t.Errorf("an input's own unknown size is said to be x's batch")
	}

	// Broadcasts of the same unrelated sizes are the same size; of others,
	// not.
	u := New("u", EmitOpset)
	for _, in := range []string{"p", "q", "r"} {
		u.AddInput(in, Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4}})
	}
	ub := NewBuilder(u, "")
	pq := ub.Add("p", "q")
	qp := ub.Cast(ub.Mul(ub.Neg("q"), "p"), ort.Float32)
	pqp := ub.Sub(pq, "p")
	pr := ub.Add("p", "r")
	u.Outputs = []string{pq, qp, pqp, pr}
	u.TraceDims()
	if !u.SameDim(pq, 0, qp, 0) || !u.SameDim(pq, 0, pqp, 0) {
		t.Errorf("p+q, -q·p and p+q-p: their batches are not known to be the same")
	}
	if u.SameDim(pq, 0, pr, 0) || u.SameDim(pq, 0, "p", 0) {
		t.Errorf("p+q's batch is said to be p+r's or p's")
	}
}

// TestInferLayerNormStats: LayerNormalization's Mean and InvStdDev keep
// the axes before axis, 1 for the normalised ones, in stash_type: the
// backward reads them, and a size left unknown there priced every op
// after it at nothing in plan.
func TestInferLayerNormStats(t *testing.T) {
	g := New("t", EmitOpset)
	g.AddInput("x", Info{DType: ort.Float32, Known: true, Shape: []int64{2, 5, 8}})
	g.AddInput("s", Info{DType: ort.Float32, Known: true, Shape: []int64{8}})
	for _, tc := range []struct {
		axis int64
		want []int64
	}{{-1, []int64{2, 5, 1}}, {1, []int64{2, 1, 1}}} {
		n := &Node{Op: "LayerNormalization", Name: g.Fresh("ln"), Inputs: []string{"x", "s"},
			Outputs: []string{g.Fresh("y"), g.Fresh("mean"), g.Fresh("invstd")}, Attrs: []*onnxpb.AttributeProto{AInt("axis", tc.axis)}}
		g.Nodes = append(g.Nodes, n)
		g.InferNode(n)
		for _, o := range n.Outputs[1:] {
			if info := g.Info(o); !info.Known || info.DType != ort.Float32 || !slices.Equal(info.Shape, tc.want) {
				t.Errorf("axis %d: %s is %v, want float32%v", tc.axis, o, info, tc.want)
			}
		}
	}
}

// TestInferConcatSizes: a Concat's sizes off its axis are any input's
// that knows them (a gradient whose sizes inference lost, joined with a
// value that has them); along the axis, the sum where every input knows
// its own.
func TestInferConcatSizes(t *testing.T) {
	g := New("t", EmitOpset)
	g.AddInput("lost", Info{DType: ort.Float32, Known: true, Shape: []int64{-1, -1, -1}})
	g.AddInput("known", Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 5, 8}})
	g.AddInput("full", Info{DType: ort.Float32, Known: true, Shape: []int64{3, 5, 2}})
	for _, tc := range []struct {
		in   []string
		want []int64
	}{{[]string{"lost", "known"}, []int64{-1, 5, -1}}, {[]string{"known", "full"}, []int64{3, 5, 10}}, {[]string{"lost", "full", "known"}, []int64{3, 5, -1}}} {
		n := &Node{Op: "Concat", Name: g.Fresh("cat"), Inputs: tc.in, Outputs: []string{g.Fresh("y")}, Attrs: []*onnxpb.AttributeProto{AInt("axis", -1)}}
		g.Nodes = append(g.Nodes, n)
		g.InferNode(n)
		if info := g.Info(n.Outputs[0]); !info.Known || !slices.Equal(info.Shape, tc.want) {
			t.Errorf("Concat of %v: %v, want %v", tc.in, info, tc.want)
		}
	}
}

// TestSameShapeTraces: a value reshaped to rows and back ([B, 4, 3] to
// [B·4, 3] to [B, 4, 3], as a chunked loss's gradient comes back) has a
// batch no op shows to be the input's, until SameShape says it has the
// input's shape; TraceDims then traces its batch, and what follows from
// it, to the input's.
func TestSameShapeTraces(t *testing.T) {
	g := New("t", EmitOpset)
	g.AddInput("x", Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4, 3}})
	b := NewBuilder(g, "")
	back := b.Reshape(b.Reshape("x", b.Ints(-1, 3)), b.Ints(-1, 4, 3))
	scaled := b.Mul(back, b.ReduceMean("x", true, 2))
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	g.TraceDims()
	if g.SameDim(back, 0, "x", 0) {
		t.Fatal("the batch traced through the rows without SameShape: the test shows nothing")
	}
	g.SameShape(back, "x")
	g.TraceDims()
	if !g.SameDim(back, 0, "x", 0) || !g.SameDim(scaled, 0, "x", 0) {
		t.Errorf("after SameShape: %v, %v; want both batches the input's", g.SameDim(back, 0, "x", 0), g.SameDim(scaled, 0, "x", 0))
	}
}
