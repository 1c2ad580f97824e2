package pytorch_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/graph"
)

// TestTrainingOnlyFromPyTorch: a PyTorch model whose adversarial term goes
// through ortrain_export.training_only and starts at a step read from
// ortrain_export.GLOBAL_STEP builds into artifacts whose training graph
// takes the step (the trainer feeds it) and trains the discriminator,
// while the eval graph neither reads the discriminator nor the step.
func TestTrainingOnlyFromPyTorch(t *testing.T) {
	needTorch(t)
	orttest.Init(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "export.py")
	model := filepath.Join(dir, "m.onnx")
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	src := `import sys, torch, torch.nn as nn
sys.path.insert(0, ` + strconv.Quote(here) + `)
import ortrain_export as ox
class M(nn.Module):
    def __init__(s):
        super().__init__()
        s.g, s.d = nn.Linear(4, 4), nn.Linear(4, 1)
    def forward(s, x, step):
        y = s.g(x)
        adv = ox.training_only((step >= 2).float() * s.d(y).mean())
        return ((y - x) ** 2).mean() + adv, y
ox.export(M(), {"x": torch.rand(3, 4), ox.GLOBAL_STEP: torch.tensor(3.0)}, sys.argv[1], output_names=["loss", "y"])
`
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(python, script, model).CombinedOutput(); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "art")
	m, err := artifacts.Build(artifacts.Options{Model: model, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if m.StepInput != graph.GlobalStepInput || slices.ContainsFunc(m.Data, func(d artifacts.Tensor) bool { return d.Name == graph.GlobalStepInput }) {
		t.Errorf("step input %q, data %v: the step is the trainer's to feed, not data", m.StepInput, m.Data)
	}
	if !slices.ContainsFunc(m.Gradients, func(g artifacts.Gradient) bool { return g.Param == "d.weight" }) {
		t.Errorf("the training graph has no gradient for the discriminator: %v", m.Gradients)
	}
	eval, err := graph.Load(filepath.Join(out, artifacts.EvalFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range eval.Nodes {
		for _, in := range n.Inputs {
			if strings.HasPrefix(in, "d.") || in == graph.GlobalStepInput {
				t.Errorf("eval graph node %s reads %s", n.Name, in)
			}
		}
	}
}
