package precision_test

import (
	"testing"

	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/precision"
)

var recipes = []struct {
	name   string
	params map[string]any
}{
	{"resnet", map[string]any{"depth": 18, "classes": 10, "image_size": 32}},
	{"bd3lm", map[string]any{"hidden": 32, "layers": 2, "heads": 2, "seq_len": 32, "block_size": 8}},
	{"vqgan3d", map[string]any{"channels": 4, "channel_mult": []int{1, 2}, "res_blocks": 1, "patch_size": []int{8, 8, 8},
		"groups": 2, "codebook_size": 16, "z_channels": 4, "embed_dim": 4}},
}

// TestAutocastRecipes: in each built-in recipe, with every kernel at hand
// (a GPU), the matrix products run in bfloat16, normalisations, softmax,
// exp/log and reductions in float32, the weights stay float32 and the
// outputs leave in float32; with no bfloat16 Conv kernel, the Convs read
// float32 (rounded) inputs and the report counts them as emulated.
func TestAutocastRecipes(t *testing.T) {
	for _, r := range recipes {
		t.Run(r.name, func(t *testing.T) {
			m, err := models.Build(r.name, r.params)
			if err != nil {
				t.Fatal(err)
			}
			g := m.Graph
			rep, err := precision.Autocast(g, precision.Options{Low: ort.BFloat16})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Low == 0 || rep.FP32 == 0 || rep.Emulated != 0 {
				t.Errorf("report %+v", rep)
			}
			for _, n := range g.Nodes {
				out := g.Info(n.Outputs[0]).DType
				switch precision.ClassOf(n) {
				case precision.Low:
					if out != ort.BFloat16 {
						t.Errorf("%s computes in %s", n.Describe(), out)
					}
				case precision.FP32:
					if n.Op != "Cast" && g.Info(n.Outputs[0]).Float() && out != ort.Float32 {
						t.Errorf("%s computes in %s", n.Describe(), out)
					}
				}
			}
			for name := range g.Initializers {
				if info := g.Info(name); info.Float() && info.DType != ort.Float32 {
					t.Errorf("weight %s became %s", name, info.DType)
				}
			}
			for _, o := range g.Outputs {
				if dt := g.Info(o).DType; g.Info(o).Float() && dt != ort.Float32 {
					t.Errorf("output %s in %s", o, dt)
				}
			}

			// No bfloat16 Conv: Convs compute in float32 on rounded inputs.
			m, _ = models.Build(r.name, r.params)
			g = m.Graph
			noConv := func(n *graph.Node, dt ort.DType) bool { return n.Op != "Conv" }
			rep, err = precision.Autocast(g, precision.Options{Low: ort.BFloat16, Kernels: noConv})
			if err != nil {
				t.Fatal(err)
			}
			convs := 0
			prod := g.Producers()
			for _, n := range g.Nodes {
				if n.Op != "Conv" {
					continue
				}
				convs++
				if dt := g.Info(n.Inputs[0]).DType; dt != ort.Float32 {
					t.Errorf("%s reads %s", n.Describe(), dt)
				}
				// Its input is a rounding: Cast to float32 of a Cast to bfloat16.
				if p := prod[n.Inputs[0]]; p == nil || p.Op != "Cast" || g.Info(p.Inputs[0]).DType != ort.BFloat16 {
					t.Errorf("%s reads %s, not a bfloat16 value cast up", n.Describe(), n.Inputs[0])
				}
			}
			if rep.Emulated != convs {
				t.Errorf("%d Convs, %d emulated", convs, rep.Emulated)
			}
		})
	}
}
