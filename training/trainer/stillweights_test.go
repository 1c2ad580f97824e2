package trainer

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/ort/onnxpb"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/callback"
)

// TestUpdateThatChangesNothingStops: an optimizer graph whose update is
// forced to zero (every new parameter is the old one) stops the run at its
// first step with lr > 0, naming the step, instead of logging steps that do
// not train; with the real optimizer graph the same run trains.
func TestUpdateThatChangesNothingStops(t *testing.T) {
	orttest.Init(t)
	dir := filepath.Join(t.TempDir(), "mlp")
	m, err := artifacts.Build(artifacts.Options{Graph: mlp(rand.New(rand.NewPCG(1, 2))), Out: dir, Loss: "cross_entropy"})
	if err != nil {
		t.Fatal(err)
	}
	c := testConfig(t, dir, "trainer.max_steps=3", "trainer.checkpoint_every_n_steps=0", "trainer.val_check_interval=1000")
	if _, err := run(t, c, "", "", &recorder{}); err != nil {
		t.Fatalf("with the real update: %v", err)
	}

	path := filepath.Join(dir, artifacts.OptimizerFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var model onnxpb.ModelProto
	if err := proto.Unmarshal(raw, &model); err != nil {
		t.Fatal(err)
	}
	g := model.Graph
	// The graph updates flat tensors of parameters (optim.Group).
	var params []string
	for _, gr := range m.Optimizer.Groups {
		for _, f := range gr.Flat {
			if f.Prefix == "" {
				params = append(params, f.Name)
			}
		}
	}
	if len(params) == 0 {
		t.Fatal("the manifest lists no flat parameter tensor")
	}
	for _, p := range params {
		for _, n := range g.Node {
			for i, out := range n.Output {
				if out == p+".out" {
					n.Output[i] = p + ".out.unused"
				}
			}
		}
		g.Node = append(g.Node, &onnxpb.NodeProto{OpType: proto.String("Identity"), Input: []string{p}, Output: []string{p + ".out"}})
	}
	if raw, err = proto.Marshal(&model); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	_, err = run(t, c, "", "", rec)
	var still *StillWeightsError
	if !errors.As(err, &still) {
		t.Fatalf("a run whose update changes nothing ended with %v, want a StillWeightsError", err)
	}
	// The warm-up starts at lr 0: the check waits for the first update
	// that could change anything.
	for _, r := range rec.results {
		if r.LR != 0 {
			t.Errorf("a step at lr %g was logged before the run stopped", r.LR)
		}
	}
	if still.Step != int64(len(rec.results))+1 || !(still.LR > 0) || !strings.Contains(err.Error(), "changed no trainable weight") {
		t.Errorf("stopped at step %d, lr %g after %d logged steps: %v; want the first step at lr > 0", still.Step, still.LR, len(rec.results), err)
	}
}

// TestWeightChangeCheckReadyBeforeSteps: the first update's check has its
// session before the first step is timed (building one mid-run took 50 ms
// of a 16-mixed ResNet-50 step on the CPU, 2 steps in, and would sit in a
// benchmark's measured steps), and closes it once it has run.
func TestWeightChangeCheckReadyBeforeSteps(t *testing.T) {
	orttest.Init(t)
	dir := filepath.Join(t.TempDir(), "mlp")
	if _, err := artifacts.Build(artifacts.Options{Graph: mlp(rand.New(rand.NewPCG(1, 2))), Out: dir, Loss: "cross_entropy"}); err != nil {
		t.Fatal(err)
	}
	c := testConfig(t, dir, "trainer.max_steps=3", "trainer.checkpoint_every_n_steps=0", "trainer.val_check_interval=1000")
	rec := &recorder{}
	tr, _ := build(t, c, "", "", []callback.Callback{rec})
	defer tr.Close()
	var ready []bool
	rec.onStep = func(*callback.State) { ready = append(ready, tr.eng.change != nil) }
	started := false
	rec.onStart = func(*callback.State) { started = tr.eng.change != nil }
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !started || !tr.changeSeen || len(ready) == 0 || ready[len(ready)-1] {
		t.Errorf("check session at the start %v, after the steps %v (change seen %v); want it built before and closed after", started, ready, tr.changeSeen)
	}
}
