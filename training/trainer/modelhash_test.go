package trainer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/rundir"
)

// forwardModel writes a one-node forward graph (x MatMul w, or x Add w
// when add) with the weight w filled with fill.
func forwardModel(t *testing.T, path string, add bool, fill float32) {
	t.Helper()
	g := graph.New("m", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{4, 4}})
	w := make([]float32, 16)
	for i := range w {
		w[i] = fill
	}
	g.AddInitializer(graph.Float32s("w", []int64{4, 4}, w))
	b := graph.NewBuilder(g, "")
	if add {
		g.Outputs = []string{b.Add("x", "w")}
	} else {
		g.Outputs = []string{b.MatMul("x", "w")}
	}
	if err := g.Save(path, graph.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
}

// onnxConfig is the test configuration of a run from the forward model
// at model whose artifacts, as setup would build them, are art: the
// trainer is given both, as setup gives them (a configuration names only
// one of model.onnx and model.artifacts).
func onnxConfig(t *testing.T, art, model string, set ...string) *config.Config {
	c := testConfig(t, art, set...)
	c.Model.ONNX = model
	return c
}

// TestResumeRefusesAnotherGraph: a run records the structure hash of its
// model.onnx in each checkpoint; a resume whose model.onnx has become
// another graph with the same weight names and shapes is refused naming
// the file (the configuration's hash leaves paths out, and the resume
// would have trained the run's own artifacts, saying nothing). The same
// graph re-exported with other initial weights, or a model.onnx that is
// gone, resumes.
func TestResumeRefusesAnotherGraph(t *testing.T) {
	art := mlpArtifacts(t)
	model := filepath.Join(t.TempDir(), "model.onnx")
	forwardModel(t, model, false, 0.5)
	c := onnxConfig(t, art, model, "trainer.max_steps=4")
	dir, err := run(t, c, "", "", &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(dir, "checkpoints", "last")
	st, err := checkpoint.ReadState(ck)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := graph.StructureHash(model); st.ModelHash == "" || st.ModelHash != want {
		t.Fatalf("checkpoint's model_hash %q, want the model's %q", st.ModelHash, want)
	}
	more := onnxConfig(t, art, model, "trainer.max_steps=5")

	forwardModel(t, model, true, 0.5) // Add for MatMul: same names and shapes
	err = CheckResume(more, ck)
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Key != "model.onnx" || !strings.Contains(err.Error(), model+" has changed since the checkpoint") {
		t.Errorf("resume after model.onnx became another graph: %v, want a model.onnx refusal naming it", err)
	}
	opts, _ := more.SessionOptions(false)
	rd, err := rundir.Resume(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(Options{Config: more, Artifacts: art, Session: opts, Train: newBlobs(96, 1), Val: newBlobs(40, 2), Dir: rd, Resume: ck})
	if err == nil {
		tr.Close()
	}
	rd.Close()
	if !errors.As(err, &ce) || ce.Key != "model.onnx" {
		t.Errorf("New resuming with another graph: %v, want a model.onnx refusal", err)
	}

	forwardModel(t, model, false, -3) // the run's graph, other initial weights
	if err := CheckResume(more, ck); err != nil {
		t.Errorf("the same graph with other initial weights: %v", err)
	}
	os.Remove(model)
	if err := CheckResume(more, ck); err != nil {
		t.Errorf("model.onnx gone (a resume needs only the run directory): %v", err)
	}
	// A resumed run's checkpoints keep the hash the run began with.
	if _, err := run(t, more, dir, ck, &recorder{}); err != nil {
		t.Fatal(err)
	}
	if st, err := checkpoint.ReadState(ck); err != nil || st.Step != 5 || st.ModelHash == "" {
		t.Errorf("after the resume: step %d, model_hash %q, %v", st.Step, st.ModelHash, err)
	}
}
