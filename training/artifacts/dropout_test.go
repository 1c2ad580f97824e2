package artifacts_test

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/graph"
)

// TestEvalGraphDropsDropout: a model exported in training mode keeps
// Dropout(x, ratio, training_mode = true); the eval graph (and so every
// exported inference model) must run it as the identity even in a runtime
// that does not optimise Dropout away. With ONNX Runtime's graph
// optimisations off, the eval loss of one batch is the same on two runs and
// equals that of the model without the Dropout.
func TestEvalGraphDropsDropout(t *testing.T) {
	orttest.Init(t)
	withDropout := func(drop bool) *graph.Graph {
		g := mlp(rand.New(rand.NewPCG(3, 4)))
		if !drop {
			return g
		}
		b := graph.NewBuilder(g, "")
		for _, n := range g.Nodes {
			if n.Op == "Relu" {
				on := b.Const(graph.Raw("", ort.Bool, nil, []byte{1}))
				d := b.Op("Dropout", []string{n.Outputs[0], b.Scalar(ort.Float32, 0.5), on})
				for _, m := range g.Nodes {
					for i, in := range m.Inputs {
						if in == n.Outputs[0] && m.Op != "Dropout" {
							m.Inputs[i] = d
						}
					}
				}
				break
			}
		}
		if err := g.Sort(); err != nil {
			t.Fatal(err)
		}
		return g
	}
	x := make([]float32, 4*16)
	for i := range x {
		x[i] = float32(i%9) - 4
	}
	y := make([]int64, 16)
	loss := func(drop bool) [2]float32 {
		dir := filepath.Join(t.TempDir(), "art")
		if _, err := artifacts.Build(artifacts.Options{Graph: withDropout(drop), Out: dir, Loss: "cross_entropy"}); err != nil {
			t.Fatal(err)
		}
		eval, err := graph.Load(filepath.Join(dir, artifacts.EvalFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range eval.Nodes {
			if n.Op == "Dropout" && len(n.Inputs) > 1 {
				t.Fatalf("eval graph keeps Dropout %s with inputs %v", n.Name, n.Inputs)
			}
		}
		tr := newTrainerOpts(t, dir, ort.Options{DisableOptimizations: true})
		var out [2]float32
		for i := range out {
			xv, _ := ort.NewTensor([]int64{16, 4}, x)
			yv, _ := ort.NewTensor([]int64{16}, y)
			out[i] = float32(tr.Eval(map[string]*ort.Value{"x": xv, "target": yv}))
			xv.Close()
			yv.Close()
		}
		return out
	}
	got, want := loss(true), loss(false)
	if got != want || got[0] != got[1] {
		t.Errorf("eval loss with Dropout %v, without %v: want the same, twice", got, want)
	}
}
