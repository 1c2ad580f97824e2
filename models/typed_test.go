package models_test

import (
	"path/filepath"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/models/internal/steptest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/precision"
)

// cudaLikeKernels stands in for a GPU's kernel probe on a machine without
// one: every op runs in the low type but Conv and ConvTranspose in
// bfloat16, which ONNX Runtime's CUDA provider lacks. The graphs built
// with it are typed as a GPU build types them (products in the low type,
// no emulating Casts), which the CPU's own builds never are.
type cudaLikeKernels struct{}

func (cudaLikeKernels) Kernels(*graph.Graph) precision.Kernels {
	return func(n *graph.Node, dt dtype.DType) bool {
		return dt != dtype.BFloat16 || n.Op != "Conv" && n.Op != "ConvTranspose"
	}
}

// sameTypeOps read all their float operands in one type (ONNX's T), with
// the operands that must match: ONNX Runtime refuses a session otherwise.
var sameTypeOps = map[string][]int{
	"Add": {0, 1}, "Sub": {0, 1}, "Mul": {0, 1}, "Div": {0, 1}, "MatMul": {0, 1}, "Gemm": {0, 1, 2},
	"Where": {1, 2}, "Max": nil, "Min": nil, "Sum": nil, "Mean": nil, "Concat": nil,
	"Conv": {0, 1, 2}, "ConvTranspose": {0, 1, 2}, "LayerNormalization": {0, 1, 2},
}

// TestTypedGPUBuilds: each recipe's artifacts built as for a GPU in
// bf16-mixed and 16-mixed (kernels as cudaLikeKernels says, the CUDA forms)
// give every node operands of one type where its op needs them: what an
// emulated CPU build, all float32, cannot show, and a GPU session would
// refuse to load (an attention rewrite once met a float32 gradient with
// bfloat16 row sums).
func TestTypedGPUBuilds(t *testing.T) {
	for _, rc := range []struct {
		recipe string
		params map[string]any
	}{
		{"resnet", map[string]any{"depth": 18, "width": 4, "image_size": 32, "classes": 3, "label_smoothing": 0}},
		{"vqgan3d", map[string]any{"patch_size": []int{8, 8, 8}, "channels": 8, "channel_mult": []int{1, 2}, "res_blocks": 1,
			"z_channels": 4, "embed_dim": 4, "codebook_size": 16, "groups": 4, "seed": 1}},
		{"bd3lm", map[string]any{"vocab": 10, "mask_token": 9, "hidden": 8, "layers": 1, "heads": 2, "seq_len": 4, "block_size": 2}},
	} {
		for _, low := range []dtype.DType{dtype.BFloat16, dtype.Float16} {
			t.Run(rc.recipe+"/"+low.String(), func(t *testing.T) {
				m, err := models.Build(rc.recipe, rc.params)
				if err != nil {
					t.Fatal(err)
				}
				_, dir := steptest.BuildOrSkip(t, artifacts.Options{Graph: m.Graph, Loss: m.Loss, CUDA: true,
					ConvForm: autodiff.ConvFormGEMM, Precision: low, Probe: cudaLikeKernels{}})
				lows := 0
				for _, f := range []string{artifacts.TrainingFile, artifacts.OptimizerFile, artifacts.EvalFile} {
					g, err := graph.Load(filepath.Join(dir, f))
					if err != nil {
						t.Fatal(err)
					}
					for _, n := range g.Nodes {
						if n.Domain != "" {
							continue
						}
						idx, ok := sameTypeOps[n.Op]
						if !ok {
							continue
						}
						if idx == nil {
							for i := range n.Inputs {
								idx = append(idx, i)
							}
						}
						var first dtype.DType
						for _, i := range idx {
							if i >= len(n.Inputs) || n.Inputs[i] == "" {
								continue
							}
							dt := g.Info(n.Inputs[i]).DType
							if dt == 0 {
								continue // not inferred from the file: nothing to compare
							}
							if dt == low {
								lows++
							}
							if first == 0 {
								first = dt
							} else if dt != first {
								t.Errorf("%s: %s reads %v and %v", f, n.Describe(), first, dt)
							}
						}
					}
				}
				if lows == 0 {
					t.Errorf("no operand in %v: the build was not typed", low)
				}
			})
		}
	}
}
