package models_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/models/internal/steptest"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/autodiff"
)

// TestCUDAFormsTrainAsCPUForms: each recipe's artifacts written for the
// CUDA provider (the gemm form's convolution gradients, cudaform's split
// reductions, sums of squares, Pads and flattened broadcasts: the LM's
// attention mask, the norms' row statistics) compute on the CPU the same
// loss and gradients as the CPU's own artifacts, to float32 rounding (each
// gradient within 1e-4 of its largest element), and then train alike for
// three AdamW steps. What the CUDA graphs change would show here, without
// a GPU.
func TestCUDAFormsTrainAsCPUForms(t *testing.T) {
	for _, rc := range []struct {
		recipe string
		params map[string]any
		batch  int64
	}{
		{"resnet", map[string]any{"depth": 18, "width": 4, "image_size": 32, "classes": 3, "label_smoothing": 0}, 4},
		{"vqgan3d", map[string]any{"patch_size": []int{8, 8, 8}, "channels": 8, "channel_mult": []int{1, 2}, "res_blocks": 1,
			"z_channels": 4, "embed_dim": 4, "codebook_size": 16, "groups": 4, "seed": 1}, 2},
		{"bd3lm", map[string]any{"vocab": 10, "mask_token": 9, "hidden": 8, "layers": 1, "heads": 2, "seq_len": 4, "block_size": 2}, 3},
	} {
		t.Run(rc.recipe, func(t *testing.T) {
			open := func(cuda bool) *steptest.Runner {
				m, err := models.Build(rc.recipe, rc.params)
				if err != nil {
					t.Fatal(err)
				}
				opts := artifacts.Options{Graph: m.Graph, Loss: m.Loss, CUDA: cuda}
				if cuda {
					opts.ConvForm = autodiff.ConvFormGEMM
				}
				_, dir := steptest.BuildOrSkip(t, opts)
				return steptest.Open(t, dir)
			}
			cpu, cuda := open(false), open(true)
			r := rand.New(rand.NewPCG(9, 10))
			data := randomBatch(t, r, cpu.M, rc.batch)
			if a, b := cpu.Backward(data), cuda.Backward(data); math.Abs(a-b) > 1e-5*max(1, math.Abs(a)) {
				t.Errorf("loss %g with the CPU forms, %g with the CUDA forms", a, b)
			}
			for _, g := range cpu.M.Gradients {
				a, b := cpu.State(g.Name()), cuda.State(g.Name())
				scale, worst := 0.0, 0.0
				for i := range a {
					scale = max(scale, math.Abs(float64(a[i])))
					worst = max(worst, math.Abs(float64(a[i]-b[i])))
				}
				if worst > 1e-4*scale {
					t.Errorf("gradient of %s: the CUDA forms' differs by %g where its largest element is %g", g.Param, worst, scale)
				}
			}
			if len(cpu.M.Gradients) == 0 {
				t.Fatal("no gradients compared")
			}
			for step := range 3 {
				data := randomBatch(t, r, cpu.M, rc.batch)
				if a, b := cpu.Step(data, 1e-3), cuda.Step(data, 1e-3); math.Abs(a-b) > 1e-4*max(1, math.Abs(a)) {
					t.Errorf("step %d: loss %g with the CPU forms, %g with the CUDA forms", step, a, b)
				}
			}
		})
	}
}

// randomBatch is a batch for m's data inputs: normal floats, token ids
// and classes below 3 (the tiny recipes' smallest vocabulary and class
// count), loss masks of ones.
func randomBatch(t *testing.T, r *rand.Rand, m *artifacts.Manifest, n int64) map[string]*ort.Value {
	t.Helper()
	data := map[string]*ort.Value{}
	for _, d := range m.Data {
		shape := append([]int64{n}, d.Shape[1:]...)
		count := ort.Numel(shape)
		dt, err := dtype.ParseDType(d.DType)
		if err != nil {
			t.Fatal(err)
		}
		var v *ort.Value
		switch dt {
		case dtype.Float32:
			f := make([]float32, count)
			for i := range f {
				f[i] = float32(r.NormFloat64())
			}
			if d.Name == "t" { // the diffusion LM's noise level, in (0, 1]
				for i := range f {
					f[i] = float32(0.05 + 0.9*r.Float64())
				}
			}
			v, err = ort.NewTensor(shape, f)
		case dtype.Int64:
			ids := make([]int64, count)
			for i := range ids {
				ids[i] = r.Int64N(3)
			}
			v, err = ort.NewTensor(shape, ids)
		case dtype.Uint8:
			ones := make([]uint8, count)
			for i := range ones {
				ones[i] = 1
			}
			v, err = ort.NewTensor(shape, ones)
		default:
			t.Fatalf("input %s: %v", d.Name, d.DType)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(v.Close)
		data[d.Name] = v
	}
	return data
}
