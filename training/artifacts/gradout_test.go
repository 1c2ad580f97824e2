package artifacts_test

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/optim"
	"github.com/ortrain/ortrain/training/precision"
)

// TestGradientOutputsWrittenByTheirNodes: in the small ResNet's training
// graph, float32 and float16-mixed, a gradient output is written by the
// node that computes it only where that node reads nothing larger than
// what it writes and is no view (the Split of the BatchNorms' M·mean, the
// float32 copy of a weight's float16 gradient); every other gradient, and
// only those, goes through an Identity. The BatchNorms' scale and shift
// gradients are written by one Split in both.
func TestGradientOutputsWrittenByTheirNodes(t *testing.T) {
	for _, low := range []dtype.DType{0, dtype.Float16} {
		t.Run(low.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "resnet")
			m, err := artifacts.Build(artifacts.Options{Graph: resnet(rand.New(rand.NewPCG(3, 4))), Out: dir, Loss: "cross_entropy",
				Optimizer: optim.Config{Kind: optim.SGD, LR: 0.05}, Precision: low, Probe: precision.NewProbe(ort.Options{}, graph.EmitOpset)})
			if err != nil {
				t.Fatal(err)
			}
			g, err := graph.Load(filepath.Join(dir, artifacts.TrainingFile))
			if err != nil {
				t.Fatal(err)
			}
			producers, consumers := g.Producers(), g.Consumers()
			// readsSmall: n is no view and reads nothing with more
			// elements than it writes, or with sizes not known before
			// the run (the batch's).
			readsSmall := func(n *graph.Node) bool {
				if n.Op == "Reshape" || n.Op == "Squeeze" || n.Op == "Unsqueeze" || n.Op == "Flatten" || n.Op == "Identity" {
					return false
				}
				var written int64
				for _, o := range n.Outputs {
					written += dtype.Numel(g.Info(o).Shape)
				}
				for _, in := range n.Inputs {
					if i := g.Info(in); in != "" && (!i.Static() || dtype.Numel(i.Shape) > written) {
						return false
					}
				}
				return true
			}
			own, bn := 0, 0
			splits := map[*graph.Node]bool{}
			for _, gr := range m.Gradients {
				n := producers[gr.Out]
				if n == nil {
					t.Fatalf("%s: no node writes it", gr.Out)
				}
				if len(consumers[gr.Out]) != 0 {
					t.Errorf("%s: read by %s", gr.Out, consumers[gr.Out][0].Describe())
				}
				if n.Op == "Identity" {
					if p := producers[n.Input(0)]; p != nil && len(consumers[n.Input(0)]) == 1 && len(p.Outputs) == 1 && readsSmall(p) {
						t.Errorf("%s: an Identity after %s, which could write it", gr.Out, p.Describe())
					}
					continue
				}
				if !readsSmall(n) {
					t.Errorf("%s: written by %s, which reads more than the gradient or is a view", gr.Out, n.Describe())
				}
				own++
				if g.Info(gr.Out).Rank() == 1 && n.Op == "Split" {
					bn++
					splits[n] = true
				}
			}
			// 6 BatchNorm layers, a scale and a shift each.
			if bn != 12 || len(splits) != 1 {
				t.Errorf("%d BatchNorm gradients written by %d Splits, want 12 by one (%d of %d gradients by their own nodes)", bn, len(splits), own, len(m.Gradients))
			}
			if low == dtype.Float16 && own <= bn {
				t.Errorf("no weight gradient written by its float32 copy (%d of %d by their own nodes)", own, len(m.Gradients))
			}
		})
	}
}
