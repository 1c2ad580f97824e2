package cudaform

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/graph"
)

// TestFlattenBroadcasts: the broadcasts the CUDA provider would run with
// its general kernel (a mask [L, L] added to scores with their batch not
// fixed, on either side of the Add; a row statistic subtracted, from the
// whole tensor and from a trailing run of its axes, with the batch fixed
// and as the mean of a tensor whose batch is not; a bias on the left of a
// Mul) leave it for the per-channel kernel, with the outputs' values bit
// for bit as before and their shapes as before. Those it cannot take that
// way stay (a Div with its full operand on the right, a broadcast over an
// axis inside the run, an operand whose unknown batch may be 1), as do a
// float32 mask Add a Softmax reads and positions added before a
// LayerNormalization (left for ONNX Runtime's fusions); those already
// fast are left alone.
func TestFlattenBroadcasts(t *testing.T) {
	orttest.Init(t)
	type binary struct {
		op         string
		a, b       []int64 // as the graph has them (-1: not fixed)
		rewritten  bool
		generalOut bool // still the general kernel's after the rewrite
	}
	cases := []binary{
		{"Add", []int64{-1, 3, 5, 6}, []int64{5, 6}, true, false},
		{"Add", []int64{5, 6}, []int64{-1, 3, 5, 6}, true, false},
		{"Sub", []int64{2, 3, 5, 6}, []int64{2, 3, 5, 1}, true, false},
		{"Sub", []int64{2, 3, 5, 6}, []int64{3, 5, 1}, true, false},
		{"Mul", []int64{6}, []int64{-1, 3, 5, 6}, true, false},
		{"Div", []int64{6}, []int64{2, 3, 5, 6}, false, true},
		{"Mul", []int64{2, 3, 5, 6}, []int64{1, 3, 1, 6}, false, true},
		{"Mul", []int64{-1, 3, 5, 6}, []int64{3, 1, 1}, false, false},
		{"Add", []int64{2, 3, 5, 6}, []int64{2, 3, 5, 6}, false, false},
	}
	g := graph.New("broadcasts", graph.EmitOpset)
	b := graph.NewBuilder(g, "")
	runShapes := map[string][]int64{}
	var want, wantGeneral int
	for i, c := range cases {
		var ins []string
		for j, s := range [][]int64{c.a, c.b} {
			in := string(rune('a'+j)) + string(rune('0'+i))
			g.AddInput(in, graph.Info{DType: dtype.Float32, Known: true, Shape: s})
			run := slices.Clone(s)
			for k := range run {
				if run[k] < 0 {
					run[k] = 2
				}
			}
			runShapes[in] = run
			ins = append(ins, in)
		}
		g.Outputs = append(g.Outputs, b.Op(c.op, ins))
		if c.rewritten {
			want++
		}
		if c.generalOut {
			wantGeneral++
		}
	}
	// Unknown sizes in the broadcast operand: a row mean of the batch's
	// own tensor is the same size on that axis (rewritten), an input of
	// its own may be 1 there (left alone).
	g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{-1, 3, 5, 6}})
	g.AddInput("rows", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{-1, 3, 5, 1}})
	runShapes["x"], runShapes["rows"] = []int64{2, 3, 5, 6}, []int64{1, 3, 5, 1}
	g.Outputs = append(g.Outputs, b.Sub("x", b.ReduceMean("x", true, 3)), b.Sub("x", "rows"))
	cases = append(cases, binary{"Sub", []int64{-1, 3, 5, 6}, []int64{-1, 3, 5, 1}, true, false},
		binary{"Sub", []int64{-1, 3, 5, 6}, []int64{-1, 3, 5, 1}, false, true})
	want, wantGeneral = want+1, wantGeneral+1
	// A float32 attention's mask: left for ONNX Runtime's BiasSoftmaxFusion.
	g.AddInput("scores", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{-1, 3, 5, 5}})
	g.AddInput("mask", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{5, 5}})
	runShapes["scores"], runShapes["mask"] = []int64{2, 3, 5, 5}, []int64{5, 5}
	g.Outputs = append(g.Outputs, b.Op("Softmax", []string{b.Add("scores", "mask")}, graph.AInt("axis", -1)))
	cases = append(cases, binary{"Add", []int64{-1, 3, 5, 5}, []int64{5, 5}, false, true})
	wantGeneral++
	// Positions added to an embedding a LayerNormalization reads: left for
	// ONNX Runtime's layer-norm fusions.
	g.AddInput("emb", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{-1, 4, 6}})
	g.AddInput("pos", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{4, 6}})
	runShapes["emb"], runShapes["pos"] = []int64{2, 4, 6}, []int64{4, 6}
	vec := func(v float64) string {
		c, err := graph.Floats("", dtype.Float32, []int64{6}, []float64{v, v, v, v, v, v})
		if err != nil {
			t.Fatal(err)
		}
		return b.Const(c)
	}
	ones, zeros := vec(1), vec(0)
	g.Outputs = append(g.Outputs, b.Op("LayerNormalization", []string{b.Add("emb", "pos"), ones, zeros}, graph.AInt("axis", -1)))
	cases = append(cases, binary{"Add", []int64{-1, 4, 6}, []int64{4, 6}, false, true})
	wantGeneral++
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	plain := g.Clone()
	if n := FlattenBroadcasts(g); n != want {
		t.Errorf("%d nodes rewritten, want %d", n, want)
	}
	general := 0
	for _, n := range g.Nodes {
		if GeneralBroadcast(g, n) {
			general++
			t.Logf("left to the general kernel: %s %v %v", n.Op, g.Info(n.Input(0)).Shape, g.Info(n.Input(1)).Shape)
		}
	}
	if general != wantGeneral {
		t.Errorf("%d nodes left to the general kernel, want %d", general, wantGeneral)
	}
	for i, o := range g.Outputs {
		if a, b := plain.Info(o), g.Info(o); !slices.Equal(a.Shape, b.Shape) {
			t.Errorf("output %d (%s) shape %v, was %v", i, cases[i].op, b.Shape, a.Shape)
		}
	}
	feed := randomFeed(t, rand.New(rand.NewPCG(7, 8)), runShapes)
	before, after := run(t, plain, feed), run(t, g, feed)
	for i := range before {
		if !slices.Equal(before[i], after[i]) {
			t.Errorf("output %d (%s %v, %v) differs from the plain node's", i, cases[i].op, cases[i].a, cases[i].b)
		}
	}
}

// TestBiasSoftmax: an Add only a Softmax reads is what ONNX Runtime's
// BiasSoftmaxFusion folds into one kernel where BiasSoftmax has its type
// and the bias broadcasts before the softmax axis only (a mask [L, L], a
// BERT mask [B, 1, 1, L], one per head [B, heads, 1, L]); FlattenBroadcasts
// leaves those, and flattens a bfloat16 one, which has no such kernel.
func TestBiasSoftmax(t *testing.T) {
	for _, c := range []struct {
		dt           dtype.DType
		scores, bias []int64
		fuses        bool
	}{
		{dtype.Float32, []int64{2, 3, 5, 5}, []int64{5, 5}, true},
		{dtype.Float16, []int64{2, 3, 5, 5}, []int64{2, 1, 1, 5}, true},
		{dtype.Float32, []int64{2, 3, 5, 5}, []int64{2, 3, 1, 5}, true},
		{dtype.Float32, []int64{2, 3, 5, 5}, []int64{5, 1}, false}, // broadcast along the softmax axis
		{dtype.Float32, []int64{2, 3, 5, 5}, []int64{1, 3, 5, 1}, false},
		{dtype.BFloat16, []int64{2, 3, 5, 5}, []int64{5, 5}, false},
	} {
		g := graph.New("bias", graph.EmitOpset)
		g.AddInput("scores", graph.Info{DType: c.dt, Known: true, Shape: c.scores})
		g.AddInput("bias", graph.Info{DType: c.dt, Known: true, Shape: c.bias})
		b := graph.NewBuilder(g, "")
		add := b.Add("scores", "bias")
		g.Outputs = []string{b.Op("Softmax", []string{add}, graph.AInt("axis", -1))}
		if b.Err != nil {
			t.Fatal(b.Err)
		}
		n, s := g.Producers()[add], g.Producers()[g.Outputs[0]]
		if got := FusesIntoSoftmax(g, n, s, c.dt); got != c.fuses {
			t.Errorf("%s %v + %v: fuses %v, want %v", c.dt, c.scores, c.bias, got, c.fuses)
		}
		if c.dt == dtype.BFloat16 {
			if k := FlattenBroadcasts(g); k != 1 {
				t.Errorf("bfloat16 mask: %d nodes flattened, want 1", k)
			}
		} else if c.fuses {
			if k := FlattenBroadcasts(g); k != 0 {
				t.Errorf("%s %v + %v: %d nodes flattened, want it left to the fusion", c.dt, c.scores, c.bias, k)
			}
		}
	}
}
