package artifacts_test

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/optim"
)

// TestCUDAFormsTrainAsCPUForms: the small ResNet's artifacts written for
// the CUDA provider (the gemm form's convolution gradients, cudaform's
// reductions, sums of squares and Pads) take the same three SGD steps on
// the CPU as the CPU's own artifacts, to float32 rounding: loss, weights
// and BatchNorm statistics. A rewrite that changed a value would show
// here, without a GPU.
func TestCUDAFormsTrainAsCPUForms(t *testing.T) {
	build := func(name string, cuda bool, form autodiff.ConvForm) *trainer {
		dir := filepath.Join(t.TempDir(), name)
		if _, err := artifacts.Build(artifacts.Options{Graph: resnet(rand.New(rand.NewPCG(3, 4))), Out: dir, Loss: "cross_entropy",
			Optimizer: optim.Config{Kind: optim.SGD, LR: 0.05}, CUDA: cuda, ConvForm: form}); err != nil {
			t.Fatal(err)
		}
		return newTrainer(t, dir)
	}
	cpu, cuda := build("cpu", false, ""), build("cuda", true, autodiff.ConvFormGEMM)
	r := rand.New(rand.NewPCG(5, 6))
	for step := range 3 {
		x := randn(r, 8*3*16*16, 1)
		y := make([]int64, 8)
		for i := range y {
			y[i] = r.Int64N(4)
		}
		losses := [2]float64{}
		for k, tr := range []*trainer{cpu, cuda} {
			xv, _ := ort.NewTensor([]int64{8, 3, 16, 16}, x)
			yv, _ := ort.NewTensor([]int64{8}, y)
			losses[k] = tr.Step(map[string]*ort.Value{"image": xv, "target": yv}, 0.05)
			xv.Close()
			yv.Close()
		}
		if d := math.Abs(losses[0] - losses[1]); d > 1e-5*max(1, math.Abs(losses[0])) {
			t.Errorf("step %d: loss %g on the CPU forms, %g on the CUDA forms", step, losses[0], losses[1])
		}
	}
	for name, v := range cpu.state {
		w, ok := cuda.state[name]
		if !ok || v.DType() != ort.Float32 {
			continue
		}
		a, b := ort.Data[float32](v), ort.Data[float32](w)
		worst := 0.0
		for i := range a {
			worst = max(worst, math.Abs(float64(a[i]-b[i]))/max(1e-2, math.Abs(float64(a[i]))))
		}
		if worst > 1e-4 {
			t.Errorf("%s after 3 steps: CUDA forms differ by %g (relative)", name, worst)
		}
	}
}

// TestCUDABuildAtCUDAOpset: a model exported at opset 20 is written at
// the CUDA provider's opset (graph.CUDAOpset) for a CUDA run and left at
// 20 for the CPU; one with a node opset 18 lacks (a tanh Gelu) stays at
// 20 with a warning saying why (which artifacts build and train print).
func TestCUDABuildAtCUDAOpset(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cuda   bool
		tanh   bool
		opset  int64
		warned bool
	}{{"cuda", true, false, graph.CUDAOpset, false}, {"cpu", false, false, 20, false}, {"cuda with a tanh Gelu", true, true, 20, true}} {
		g := mlp(rand.New(rand.NewPCG(1, 2)))
		g.Opset = 20
		if tc.tanh {
			n := g.Producers()["logits"]
			b := graph.NewBuilder(g, "")
			n.Inputs[0] = b.Op("Gelu", []string{n.Inputs[0]}, graph.AString("approximate", "tanh"))
			if err := g.Sort(); err != nil {
				t.Fatal(err)
			}
		}
		m, err := artifacts.Build(artifacts.Options{Graph: g, Out: filepath.Join(t.TempDir(), "a"), Loss: "cross_entropy", CUDA: tc.cuda})
		if err != nil {
			t.Fatal(err)
		}
		warned := false
		for _, w := range m.Warnings {
			warned = warned || strings.Contains(w, "opset 20")
		}
		if m.Opset != tc.opset || warned != tc.warned {
			t.Errorf("%s: opset %d, want %d; warnings %q", tc.name, m.Opset, tc.opset, m.Warnings)
		}
	}
}
