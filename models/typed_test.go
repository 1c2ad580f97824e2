package models_test

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/models/internal/steptest"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/precision"
)

// TestTypedGPUBuilds: each recipe's artifacts built as for a GPU in
// bf16-mixed and 16-mixed (kernels as steptest.CUDALikeKernels says, the
// CUDA forms) give every node operands of one type where its op needs
// them: what an
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
					ConvForm: autodiff.ConvFormGEMM, Precision: low, Probe: steptest.CUDALikeKernels{}})
				lows := steptest.CheckOperandTypes(t, dir, low)
				if lows == 0 {
					t.Errorf("no operand in %v: the build was not typed", low)
				}
			})
		}
	}
}

// without is steptest.CUDALikeKernels without a low-precision kernel for
// op: the graphs keep such a node in float32 between Casts.
type without struct{ op string }

func (w without) Kernels(g *graph.Graph) precision.Kernels {
	k := steptest.CUDALikeKernels{}.Kernels(g)
	return func(n *graph.Node, dt dtype.DType) bool { return n.Op != w.op && k(n, dt) }
}

// TestLowPrecisionNodesStep: a step built as for CUDA, where BatchNorm
// and its backward (a ResNet in 16-mixed, precision.LowBatchNorms), the
// LayerNormalization computing its statistics (at 64²,
// precision.LowRowStatistics) or attention's Softmax and its gradient
// (the diffusion LM, precision.LowSoftmaxes and LowSoftmaxGrads; in
// float16, since the CPU has no bfloat16 MatMul to run the rest with) runs
// in the low type, against the same step with those nodes in float32
// between Casts, both run on the CPU provider: the loss, the eval loss and
// every gradient agree, so the rewired nodes read the values they replace
// (swapping two of a BatchNorm's inputs fails it by 300%). The CPU
// computes a low node it lacks in float32 and drops the Cast pairs that
// then meet, so it cannot show most of the rounding the GPU's kernels add
// (about one low rounding of each output): most figures come out equal.
// The eval graphs are rewritten too.
func TestLowPrecisionNodesStep(t *testing.T) {
	for _, tc := range []struct {
		recipe string
		params map[string]any
		low    dtype.DType
		op     string
	}{
		{"resnet", map[string]any{"depth": 18, "width": 4, "image_size": 32, "classes": 3, "label_smoothing": 0}, dtype.Float16, "BatchNormalization"},
		// At 64² the first layers' statistics are LayerNormalizations'
		// (autodiff's rowStatistics), over the float16 input with it.
		{"resnet", map[string]any{"depth": 18, "width": 4, "image_size": 64, "classes": 3, "label_smoothing": 0}, dtype.Float16, "LayerNormalization"},
		{"bd3lm", map[string]any{"vocab": 10, "mask_token": 9, "hidden": 8, "layers": 2, "heads": 2, "seq_len": 4, "block_size": 2}, dtype.Float16, "Softmax"},
	} {
		t.Run(tc.recipe+"/"+tc.op, func(t *testing.T) {
			var runs [2]*steptest.Runner
			var lows [2]int
			for i, probe := range []artifacts.KernelProbe{without{tc.op}, steptest.CUDALikeKernels{}} {
				m, err := models.Build(tc.recipe, tc.params)
				if err != nil {
					t.Fatal(err)
				}
				_, dir := steptest.BuildOrSkip(t, artifacts.Options{Graph: m.Graph, Loss: m.Loss, CUDA: true,
					ConvForm: autodiff.ConvFormGEMM, Precision: tc.low, Probe: probe})
				for _, f := range []string{artifacts.TrainingFile, artifacts.EvalFile} {
					g, err := graph.Load(filepath.Join(dir, f))
					if err != nil {
						t.Fatal(err)
					}
					for _, n := range g.Nodes {
						if n.Op == tc.op && g.Info(n.Input(0)).DType == tc.low {
							lows[i]++
						}
					}
				}
				runs[i] = steptest.Open(t, dir)
			}
			if lows[0] != 0 || lows[1] == 0 {
				t.Fatalf("%s nodes in %v: %d without the kernel, %d with it", tc.op, tc.low, lows[0], lows[1])
			}
			feeds := map[string]*ort.Value{}
			for _, d := range runs[0].M.Data {
				shape := slices.Clone(d.Shape)
				for k, n := range shape {
					if n < 0 {
						shape[k] = 4
					}
				}
				var v *ort.Value
				switch d.DType {
				case "float32": // images; the LM's diffusion times, in (0, 1]
					x := make([]float32, ort.Numel(shape))
					for k := range x {
						x[k] = 0.55 + 0.45*float32(math.Sin(float64(k)*0.37))
					}
					v, _ = ort.NewTensor(shape, x)
				case "int64": // classes; tokens, every third of the noisy ones the mask
					x := make([]int64, ort.Numel(shape))
					for k := range x {
						x[k] = int64(k % 3)
						if d.Name == "noisy_ids" && k%3 == 0 {
							x[k] = int64(tc.params["mask_token"].(int))
						}
					}
					v, _ = ort.NewTensor(shape, x)
				case "uint8", "bool":
					x := make([]uint8, ort.Numel(shape))
					for k := range x {
						x[k] = uint8(k % 2)
					}
					dt := ort.Uint8
					if d.DType == "bool" {
						dt = ort.Bool
					}
					v, _ = ort.NewTensorFromBytes(dt, shape, x)
				default:
					t.Fatalf("data input %s: %s", d.Name, d.DType)
				}
				feeds[d.Name] = v
				defer v.Close()
			}
			if name := runs[0].M.LossScaleInput; name != "" {
				scale, _ := ort.NewScalar(float32(1))
				defer scale.Close()
				feeds[name] = scale
			}
			var loss, eval [2]float64
			for i, r := range runs {
				loss[i] = r.Backward(feeds)
				eval[i] = r.Eval(feeds)
			}
			t.Logf("loss %.7f / %.7f, eval loss %.7f / %.7f (float32 %s / %v)", loss[0], loss[1], eval[0], eval[1], tc.op, tc.low)
			for _, pair := range [][2]float64{loss, eval} {
				if !(math.Abs(pair[0]-pair[1]) <= 5e-3*math.Abs(pair[0])) { // NaN fails too
					t.Errorf("losses %v differ by more than a low rounding", pair)
				}
			}
			// A gradient that is zero in exact arithmetic (attention's key
			// bias: each row of scores shifts by one value, which softmax
			// ignores) is rounding noise in both builds, compared against
			// the step's gradients at large: 10⁻⁴ of the largest norm.
			floor := 1e-6
			for _, p := range runs[0].M.Params {
				floor = max(floor, 1e-4*norm(runs[0].State("grad."+p.Name)))
			}
			worst, worstName := 0.0, ""
			for _, p := range runs[0].M.Params {
				a, b := runs[0].State("grad."+p.Name), runs[1].State("grad."+p.Name)
				e := diffNorm(a, b) / max(norm(a), floor)
				if e > worst {
					worst, worstName = e, p.Name
				}
				if !(e <= 2e-2) {
					t.Errorf("gradient of %s: relative L2 difference %.2e (norm %.3g)", p.Name, e, norm(a))
				}
			}
			t.Logf("largest relative L2 difference of a gradient: %.2e %s", worst, worstName)
		})
	}
}

// TestGeluWhereTheDeviceHasIt: the diffusion LM's exact GELU is one
// com.microsoft Gelu node (autodiff.FuseGelus) in a float32 build and in
// a bf16-mixed one for a device with its bfloat16 kernel; for a device
// that runs element-wise ops in bfloat16 but has no bfloat16 Gelu it
// stays the elementary chain, which runs in bfloat16 there.
func TestGeluWhereTheDeviceHasIt(t *testing.T) {
	params := map[string]any{"vocab": 10, "mask_token": 9, "hidden": 8, "layers": 1, "heads": 2, "seq_len": 4, "block_size": 2}
	for _, tc := range []struct {
		name  string
		low   dtype.DType
		probe artifacts.KernelProbe
		gelu  bool
	}{{"float32", 0, nil, true}, {"bf16-mixed", dtype.BFloat16, steptest.CUDALikeKernels{}, true}, {"no bfloat16 Gelu", dtype.BFloat16, without{"Gelu"}, false}} {
		m, err := models.Build("bd3lm", params)
		if err != nil {
			t.Fatal(err)
		}
		_, dir := steptest.BuildOrSkip(t, artifacts.Options{Graph: m.Graph, Loss: m.Loss, CUDA: true,
			ConvForm: autodiff.ConvFormGEMM, Precision: tc.low, Probe: tc.probe})
		g, err := graph.Load(filepath.Join(dir, artifacts.TrainingFile))
		if err != nil {
			t.Fatal(err)
		}
		if got := g.CountOp("Gelu") > 0; got != tc.gelu {
			t.Errorf("%s: Gelu nodes %v, want %v", tc.name, got, tc.gelu)
		}
	}
}
