package autodiff_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// TestRecomputeCheapIsExact: a block with the activations the models use
// (Conv, training-mode BatchNorm, SiLU, GroupNorm, GELU, LayerNorm) gives
// bit-identical gradients with and without the cheap values recomputed in
// the backward pass, and the backward no longer keeps the SiLU's sigmoid,
// the BatchNorm, GroupNorm (a Reshape of InstanceNormalization) and
// LayerNorm outputs, nor GELU's 1+erf (an Add).
func TestRecomputeCheapIsExact(t *testing.T) {
	orttest.Init(t)
	shapes := map[string][]int64{"x": {2, 4, 5, 5}, "w": {8, 4, 3, 3}, "gamma": {8}, "beta": {8}, "mean": {8}, "var": {8},
		"gs": {8}, "gb": {8}, "ls": {5}, "lb": {5}}
	order := []string{"x", "w", "gamma", "beta", "mean", "var", "gs", "gb", "ls", "lb"}
	wrt := []string{"x", "w", "gamma", "beta", "gs", "gb", "ls", "lb"}
	build := func(recompute bool) (*graph.Graph, []string) {
		g := graph.New("block", graph.EmitOpset)
		for _, n := range order {
			g.AddInput(n, graph.Info{DType: ort.Float32, Known: true, Shape: shapes[n]})
		}
		b := graph.NewBuilder(g, "fwd/")
		h := b.Op("Conv", []string{"x", "w"}, ais("pads", s(1, 1, 1, 1)))
		h = b.OpN("BatchNormalization", []string{h, "gamma", "beta", "mean", "var"}, 3, ai("training_mode", 1))[0]
		h = b.Mul(h, b.Sigmoid(h))
		h = b.GroupNorm(h, "gs", "gb", 2, 1e-5)
		h = b.Gelu(h)
		h = b.LayerNorm(h, "ls", "lb", -1, 1e-5)
		loss := b.ReduceSum(b.Mul(h, h), false)
		if _, err := autodiff.TrainingBatchNorm(g, func(s string) string { return s + ".out" }, false); err != nil {
			t.Fatal(err)
		}
		forward := len(g.Nodes)
		grads, err := autodiff.Gradients(g, loss, wrt, "grad/")
		if err != nil {
			t.Fatal(err)
		}
		var dropped []string
		if recompute {
			if dropped, err = autodiff.Recompute(g, forward, map[string]bool{loss: true}, nil, autodiff.RecomputeCheap); err != nil {
				t.Fatal(err)
			}
		}
		g.Outputs = []string{loss}
		for _, w := range wrt {
			g.Outputs = append(g.Outputs, grads[w])
		}
		g.Prune()
		g.StripStopGradients()
		return g, dropped
	}
	r := rand.New(rand.NewPCG(3, 4))
	feed := map[string]*ort.Value{}
	for _, n := range order {
		gen := normal
		if n == "var" {
			gen = positive
		}
		feed[n] = tensor(t, ort.Float32, shapes[n], fill(r, gen, int(ort.Numel(shapes[n]))))
		defer feed[n].Close()
	}
	run := func(g *graph.Graph) [][]float64 { return runOutputs(t, g, feed) }
	plain, _ := build(false)
	recomputed, dropped := build(true)
	want, got := run(plain), run(recomputed)
	for i := range want {
		if !slices.Equal(want[i], got[i]) {
			t.Errorf("output %s differs with recomputation", plain.Outputs[i])
		}
	}
	var ops []string
	prod := plain.Producers()
	for _, v := range dropped {
		if p := prod[v]; p != nil {
			ops = append(ops, p.Op)
		}
	}
	for _, op := range []string{"Sigmoid", "BatchNormalization", "Reshape", "Add", "LayerNormalization"} {
		if !slices.Contains(ops, op) {
			t.Errorf("the %s output is still kept for the backward; recomputed: %s", op, strings.Join(ops, " "))
		}
	}
}

// TestRecomputeBlocksIsExact: a residual stack (pre-norm MLP blocks, as a
// transformer's) gives bit-identical gradients under every policy; with
// blocks the backward keeps none of the blocks' insides, only values
// on the residual stream, and never a Dropout's output (a second draw
// would differ).
func TestRecomputeBlocksIsExact(t *testing.T) {
	orttest.Init(t)
	const layers, d, f = 6, 8, 32
	shapes := map[string][]int64{"x": {4, 5, d}}
	order := []string{"x"}
	for l := range layers {
		for _, p := range []struct {
			name  string
			shape []int64
		}{{"ls", s(d)}, {"lb", s(d)}, {"w1", s(d, f)}, {"w2", s(f, d)}} {
			name := p.name + string(rune('0'+l))
			shapes[name] = p.shape
			order = append(order, name)
		}
	}
	wrt := order
	build := func(policy string) (*graph.Graph, []string, map[string]string) {
		g := graph.New("stack", graph.EmitOpset)
		for _, n := range order {
			g.AddInput(n, graph.Info{DType: ort.Float32, Known: true, Shape: shapes[n]})
		}
		b := graph.NewBuilder(g, "fwd/")
		h := "x"
		producer := map[string]string{}
		for l := range layers {
			i := string(rune('0' + l))
			u := b.LayerNorm(h, "ls"+i, "lb"+i, -1, 1e-5)
			u = b.Gelu(b.MatMul(u, "w1"+i))
			if l == 2 {
				u = b.OpN("Dropout", []string{u, b.Scalar(ort.Float32, 0.0)}, 2)[0]
				producer[u] = "Dropout"
			}
			h = b.Add(h, b.MatMul(u, "w2"+i))
			producer[h] = "residual"
		}
		loss := b.ReduceSum(b.Mul(h, h), false)
		forward := len(g.Nodes)
		grads, err := autodiff.Gradients(g, loss, wrt, "grad/")
		if err != nil {
			t.Fatal(err)
		}
		dropped, err := autodiff.Recompute(g, forward, map[string]bool{loss: true}, map[string]bool{"x": true}, policy)
		if err != nil {
			t.Fatal(err)
		}
		g.Outputs = []string{loss}
		for _, w := range wrt {
			g.Outputs = append(g.Outputs, grads[w])
		}
		g.Prune()
		if err := g.Sort(); err != nil {
			t.Fatal(err)
		}
		return g, dropped, producer
	}
	r := rand.New(rand.NewPCG(5, 6))
	feed := map[string]*ort.Value{}
	for _, n := range order {
		feed[n] = tensor(t, ort.Float32, shapes[n], fill(r, normal, int(ort.Numel(shapes[n]))))
		defer feed[n].Close()
	}
	run := func(g *graph.Graph) [][]float64 { return runOutputs(t, g, feed) }
	plain, _, _ := build(autodiff.RecomputeNone)
	want := run(plain)
	for _, policy := range autodiff.RecomputePolicies {
		g, dropped, producer := build(policy)
		got := run(g)
		for i := range want {
			if !slices.Equal(want[i], got[i]) {
				t.Errorf("%s: output %s differs from the plain build's", policy, plain.Outputs[i])
			}
		}
		if policy != autodiff.RecomputeBlocks {
			continue
		}
		// What the backward still reads from the forward pass.
		fwd := map[string]bool{}
		for _, n := range plain.Nodes {
			if !strings.HasPrefix(n.Name, "grad/") {
				fwd[n.Outputs[0]] = true
			}
		}
		kept := map[string]bool{}
		for _, n := range g.Nodes {
			if strings.HasPrefix(n.Name, "grad/") {
				for _, in := range n.Inputs {
					if fwd[in] {
						kept[in] = true
					}
				}
			}
		}
		if len(dropped) == 0 {
			t.Fatalf("blocks recomputed nothing")
		}
		for v := range kept {
			if p := producer[v]; p == "" && g.Info(v).Rank() > 1 {
				t.Errorf("blocks keeps %s, inside a block", v)
			}
		}
		for v, p := range producer {
			if p == "Dropout" && slices.Contains(dropped, v) {
				t.Errorf("blocks recomputes the Dropout output %s", v)
			}
		}
		if len(kept) > layers+1 { // a residual value per block, and the Dropout's
			t.Errorf("blocks keeps %d forward values for %d blocks: %v", len(kept), layers, kept)
		}
	}
}

// TestBackwardLeanOnMemory: the backward of a sum over Exp (a logsumexp)
// multiplies Exp's output by the sum's gradient broadcast, not by an
// expanded copy, with the full-size operand first (where ONNX Runtime may
// write in place); and a weight read twice (a tied embedding and output
// head) gets the contribution computed first placed last before the Sum,
// where ONNX Runtime's order reaches it first.
func TestBackwardLeanOnMemory(t *testing.T) {
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("h", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{2, 3, 4}})
	g.AddInput("emb", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{10, 4}})
	g.AddInput("ids", graph.Info{DType: ort.Int64, Known: true, Shape: []int64{2, 3}})
	b := graph.NewBuilder(g, "fwd/")
	x := b.Add("h", b.Op("Gather", []string{"emb", "ids"}, graph.AInt("axis", 0)))
	logits := b.MatMul(x, b.Transpose("emb", 1, 0))
	y := b.Exp(logits)
	loss := b.ReduceSum(b.Log(b.ReduceSum(y, false, 2)), false)
	forward := len(g.Nodes)
	if _, err := autodiff.Gradients(g, loss, []string{"h", "emb"}, "grad/"); err != nil {
		t.Fatal(err)
	}
	var sum *graph.Node
	for _, n := range g.Nodes[forward:] {
		if n.Op == "Expand" && g.Info(n.Outputs[0]).Rank() == 3 {
			for _, m := range g.Nodes {
				if slices.Contains(m.Inputs, n.Outputs[0]) {
					t.Errorf("the backward expands a gradient to full size: %s, read by %s", n.Describe(), m.Describe())
				}
			}
		}
		if slices.Contains(n.Inputs, y) && n.Op == "Mul" && n.Inputs[0] != y {
			t.Errorf("%s reads Exp's output as its second operand", n.Describe())
		}
		if n.Op == "Sum" {
			sum = n
		}
	}
	if sum == nil || len(sum.Inputs) != 2 {
		t.Fatalf("no Sum of the embedding's two contributions")
	}
	at := map[string]int{}
	for i, n := range g.Nodes {
		for _, o := range n.Outputs {
			at[o] = i
		}
	}
	// The head's contribution (first made) is produced last before the Sum.
	if head, gather := at[sum.Inputs[0]], at[sum.Inputs[1]]; head < gather || head != at[sum.Outputs[0]]-1 {
		t.Errorf("contributions at %d (head) and %d (gather), Sum at %d", head, gather, at[sum.Outputs[0]])
	}
}

// TestRecomputeCheapKeepsWeightCasts: under the cheap policy the backward
// recomputes the batch's casts to float16 and back, but reads the
// weight's from the forward pass (#31): the weight is kept anyway, and
// its rounded copies are the weight's size, not the batch's.
func TestRecomputeCheapKeepsWeightCasts(t *testing.T) {
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{2, 3}})
	g.AddInput("w", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{3, 4}})
	b := graph.NewBuilder(g, "fwd/")
	rounded := func(v string) string { return b.Cast(b.Cast(v, ort.Float16), ort.Float32) }
	y := b.MatMul(rounded("x"), rounded("w"))
	loss := b.ReduceSum(b.Mul(y, y), false)
	forward := len(g.Nodes)
	if _, err := autodiff.Gradients(g, loss, []string{"x", "w"}, "grad/"); err != nil {
		t.Fatal(err)
	}
	if _, err := autodiff.Recompute(g, forward, map[string]bool{loss: true}, map[string]bool{"x": true}, autodiff.RecomputeCheap); err != nil {
		t.Fatal(err)
	}
	recast := map[string]int{}
	for _, n := range g.Nodes {
		if strings.HasSuffix(n.Name, "/recompute") && n.Op == "Cast" {
			root := n.Inputs[0]
			for strings.HasSuffix(root, "/recompute") {
				root = g.Producers()[root].Inputs[0]
			}
			recast[root]++
		}
	}
	if recast["w"] != 0 || recast["x"] != 2 {
		t.Errorf("recomputed Casts, by the input they start from: %v; want both of x's and none of w's", recast)
	}
}

// TestRecomputeCheapKeepsNarrowSource: a float32 copy of a float16 value
// that the backward reads (a BatchNorm's input after a float16 Conv) is
// cast again in the backward from the float16 value, which is kept
// instead: half the bytes held across the step, the same values.
func TestRecomputeCheapKeepsNarrowSource(t *testing.T) {
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{2, 3}})
	g.AddInput("w", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{3, 4}})
	b := graph.NewBuilder(g, "fwd/")
	low := b.Cast(b.MatMul("x", "w"), ort.Float16)
	wide := b.Cast(low, ort.Float32)
	loss := b.ReduceSum(b.Mul(wide, wide), false)
	forward := len(g.Nodes)
	if _, err := autodiff.Gradients(g, loss, []string{"w"}, "grad/"); err != nil {
		t.Fatal(err)
	}
	if _, err := autodiff.Recompute(g, forward, map[string]bool{loss: true}, map[string]bool{"x": true}, autodiff.RecomputeCheap); err != nil {
		t.Fatal(err)
	}
	readsLow, readsWide := false, false
	for _, n := range g.Nodes[forward:] {
		for _, in := range n.Inputs {
			readsLow = readsLow || in == low
			readsWide = readsWide || in == wide
		}
	}
	if !readsLow || readsWide {
		t.Errorf("the backward reads the float16 value: %v, the float32 copy: %v; want only the float16 one", readsLow, readsWide)
	}
}
