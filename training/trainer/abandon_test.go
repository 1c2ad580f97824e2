package trainer

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/callback"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/graph"
)

// mlpBN is mlp with a BatchNormalization after its first layer: a model
// with buffers (the running statistics), which every micro-batch updates.
func mlpBN(r *rand.Rand) *graph.Graph {
	g := mlp(r)
	ones := []float32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	g.AddInitializer(graph.Float32s("bn.weight", []int64{16}, ones))
	g.AddInitializer(graph.Float32s("bn.bias", []int64{16}, make([]float32, 16)))
	g.AddInitializer(graph.Float32s("bn.running_mean", []int64{16}, make([]float32, 16)))
	g.AddInitializer(graph.Float32s("bn.running_var", []int64{16}, ones))
	for _, n := range g.Nodes {
		if n.Op == "Relu" {
			b := graph.NewBuilder(g, "bn/")
			bn := b.Op("BatchNormalization", []string{n.Inputs[0], "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"})
			n.Inputs[0] = bn
		}
	}
	return g
}

// TestStopDuringAStep: a stop requested between the micro-batches of a
// step drops that step (its buffers and data position go back to where it
// began), the run ends with a checkpoint of the steps before it, and a
// resume from there gives the uninterrupted run's losses, gradient norms
// and final weights, buffers and optimizer state bit for bit — with and
// without buffers the micro-batches update.
func TestStopDuringAStep(t *testing.T) {
	orttest.Init(t)
	for _, tc := range []struct {
		name  string
		model func(*rand.Rand) *graph.Graph
	}{{"no buffers", mlp}, {"batchnorm", mlpBN}} {
		t.Run(tc.name, func(t *testing.T) {
			art := filepath.Join(t.TempDir(), "art")
			m, err := artifacts.Build(artifacts.Options{Graph: tc.model(rand.New(rand.NewPCG(1, 2))), Out: art, Loss: "cross_entropy"})
			if err != nil {
				t.Fatal(err)
			}
			if want := tc.name == "batchnorm"; (len(m.Buffers) > 0) != want {
				t.Fatalf("%d buffers", len(m.Buffers))
			}
			c := testConfig(t, art, "trainer.accumulate_grad_batches=3", "trainer.max_steps=12", "trainer.checkpoint_every_n_steps=100")
			full := &recorder{}
			fullDir, err := run(t, c, "", "", full)
			if err != nil {
				t.Fatal(err)
			}

			part := &recorder{}
			tr, rd := build(t, c, "", "", []callback.Callback{part})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tr.afterMicroBatch = func(step int64, k int) {
				if step == 7 && k == 1 {
					cancel()
				}
			}
			if err := tr.Run(ctx); err != nil {
				t.Fatal(err)
			}
			tr.Close()
			rd.Close()
			if len(part.results) != 6 || !strings.Contains(part.stopReason, "micro-batches were dropped; checkpoint written") {
				t.Fatalf("stopped after %d steps (%q), want 6 and the seventh dropped", len(part.results), part.stopReason)
			}
			ck, err := checkpoint.Latest(filepath.Join(rd.Path, "checkpoints"))
			if err != nil {
				t.Fatal(err)
			}
			rest := &recorder{}
			if _, err := run(t, c, rd.Path, ck, rest); err != nil {
				t.Fatal(err)
			}
			got := append(part.results, rest.results...)
			if len(got) != len(full.results) {
				t.Fatalf("interrupted + resumed = %d steps, uninterrupted %d", len(got), len(full.results))
			}
			for i := range got {
				a, b := full.results[i], got[i]
				if math.Float64bits(a.Loss) != math.Float64bits(b.Loss) || math.Float64bits(a.GradNorm) != math.Float64bits(b.GradNorm) {
					t.Errorf("step %d: loss %v grad_norm %v, uninterrupted %v %v", i+1, b.Loss, b.GradNorm, a.Loss, a.GradNorm)
				}
			}
			equalTensors(t, filepath.Join(fullDir, "checkpoints", "last"), filepath.Join(rd.Path, "checkpoints", "last"))
		})
	}
}
