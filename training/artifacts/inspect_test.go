package artifacts_test

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
)

// TestInspect: the report counts the MLP's 16*4+16+16*3+3 = 131 trained
// values, lists the graphs' interfaces, and finds a CPU kernel for every op
// (the artifacts use stock ONNX Runtime kernels only).
func TestInspect(t *testing.T) {
	orttest.Init(t)
	dir := filepath.Join(t.TempDir(), "a")
	if _, err := artifacts.Build(artifacts.Options{Graph: mlp(rand.New(rand.NewPCG(5, 5))), Out: dir, Loss: "mse", Frozen: []string{"fc2.bias"}}); err != nil {
		t.Fatal(err)
	}
	rep, err := artifacts.Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ParamCount != 128 || len(rep.Manifest.Frozen) != 1 {
		t.Errorf("param count %d, frozen %d; want 128 (131 less the frozen fc2.bias) and 1", rep.ParamCount, len(rep.Manifest.Frozen))
	}
	for _, g := range rep.Graphs {
		if g.CPU != "ok" {
			t.Errorf("%s on CPU: %s", g.File, g.CPU)
		}
	}
	s := rep.String()
	for _, want := range []string{"training.onnx", "grad.fc1.weight.out", "flat0.params", "Gemm", "grad_norm"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
	// The training graph writes each micro-batch's gradients; the trainer
	// sums micro-batches.
	if strings.Contains(s, "reset: bool[]") {
		t.Errorf("the training graph reads reset:\n%s", s)
	}
	if strings.Contains(s, "grad.fc2.bias") {
		t.Error("frozen fc2.bias has a gradient accumulator")
	}
}

// TestMemory: the MLP's training state is its 128 trained values in four
// bytes, twice each for the parameters, the gradients and AdamW's two
// moments, plus the frozen fc2.bias once; the activations at the peak grow
// with the batch, and the report names the largest.
func TestMemory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a")
	if _, err := artifacts.Build(artifacts.Options{Graph: mlp(rand.New(rand.NewPCG(5, 5))), Out: dir, Loss: "mse", Frozen: []string{"fc2.bias"}}); err != nil {
		t.Fatal(err)
	}
	small, err := artifacts.Memory(dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	large, err := artifacts.Memory(dir, 64)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(128*4*2*4 + 3*4); small.State != want {
		t.Errorf("state %d bytes, want %d", small.State, want)
	}
	if small.Peak <= 0 || large.Peak < 8*small.Peak {
		t.Errorf("peak %d bytes at batch 4, %d at 64: want positive and growing with the batch", small.Peak, large.Peak)
	}
	if s := large.String(); !strings.Contains(s, "activations at the peak") || !strings.Contains(s, large.Live[0].Name) {
		t.Errorf("report:\n%s", s)
	}
}
