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
		if _, err := autodiff.TrainingBatchNorm(g, func(s string) string { return s + ".out" }); err != nil {
			t.Fatal(err)
		}
		forward := len(g.Nodes)
		grads, err := autodiff.Gradients(g, loss, wrt, "grad/")
		if err != nil {
			t.Fatal(err)
		}
		var dropped []string
		if recompute {
			if dropped, err = autodiff.RecomputeCheap(g, forward, map[string]bool{loss: true}); err != nil {
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
	run := func(g *graph.Graph) [][]float64 {
		m, err := g.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		sess, err := ort.NewSessionFromBytes(m, ort.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		outs, err := sess.Run(feed, g.Outputs...)
		if err != nil {
			t.Fatal(err)
		}
		var res [][]float64
		for _, o := range outs {
			res = append(res, values(o))
			o.Close()
		}
		return res
	}
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
