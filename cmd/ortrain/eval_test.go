package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/graph"
)

// TestEvalCheckpoint trains the linear classifier for a few steps, then
// evaluates its checkpoint as a user would: the metrics are printed and
// written once, a second evaluation into the same place is refused, and the
// checkpoint given with the config of a model of another shape is refused
// naming the parameter.
func TestEvalCheckpoint(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	art := filepath.Join(root, "art")
	linearArtifacts(t, art)
	cfg := filepath.Join(root, "run.toml")
	body := `name = "lin"
output_dir = "` + filepath.Join(root, "outputs") + `"
[model]
artifacts = "ART"
[data]
kind = "synthetic"
batch_size = 16
num_workers = 1
[trainer]
device = "cpu"
max_steps = 8
val_check_interval = 4
limit_val_batches = 2
checkpoint_every_n_steps = 4
[optimizer]
lr = 0.05
`
	os.WriteFile(cfg, []byte(strings.Replace(body, "ART", art, 1)), 0o644)
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "train", "--config", cfg}, &out, &errOut); code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut.String())
	}
	version := filepath.Join(root, "outputs", "lin", "version_0")

	out.Reset()
	errOut.Reset()
	if code := run([]string{"ortrain", "eval", "--checkpoint", version, "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("eval: exit %d: %s", code, errOut.String())
	}
	var res struct {
		Step int64
		Mean map[string]float64
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("eval --json printed %q: %v", out.String(), err)
	}
	if _, top5 := res.Mean["val/top5"]; res.Step != 8 || !(res.Mean["val/loss"] > 0) || !(res.Mean["val/top1"] >= 0 && res.Mean["val/top1"] <= 1) || top5 {
		t.Errorf("eval of step-8 checkpoint: %+v, want step 8, a positive val/loss, val/top1 in [0,1], no val/top5 with 3 classes", res)
	}
	written := filepath.Join(version, "eval", "step-000000008", "metrics.json")
	if _, err := os.Stat(written); err != nil {
		t.Errorf("metrics.json not written where documented: %v", err)
	}
	if code := run([]string{"ortrain", "eval", "--checkpoint", version}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "exists") {
		t.Errorf("a second eval into the same place: exit %d, %s; want 2 and no overwrite", code, errOut.String())
	}

	// --set without --config applies to the checkpoint's configuration:
	// an unknown key is refused rather than ignored.
	errOut.Reset()
	if code := run([]string{"ortrain", "eval", "--checkpoint", version, "--out-dir", filepath.Join(root, "e4"), "--set", "trainer.max_stpes=1"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "trainer.max_stpes") {
		t.Errorf("eval --set with a typo, no --config: exit %d, %q; want 2 naming the key", code, errOut.String())
	}

	// An existing report file is refused before anything is written, and
	// replaced with --overwrite.
	rep := filepath.Join(root, "mine.html")
	os.WriteFile(rep, []byte("mine"), 0o644)
	errOut.Reset()
	e3 := filepath.Join(root, "e3")
	if code := run([]string{"ortrain", "eval", "--checkpoint", version, "--out-dir", e3, "--report", rep}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), rep) {
		t.Errorf("eval --report over an existing file: exit %d, %q; want 2 naming it", code, errOut.String())
	}
	if b, _ := os.ReadFile(rep); string(b) != "mine" {
		t.Error("the refused eval changed the report file")
	}
	if _, err := os.Stat(e3); err == nil {
		t.Error("the refused eval wrote its metrics")
	}
	if code := run([]string{"ortrain", "eval", "--checkpoint", version, "--out-dir", e3, "--report", rep, "--overwrite"}, &out, &errOut); code != 0 {
		t.Errorf("eval --report --overwrite: exit %d, %s", code, errOut.String())
	}
	if b, _ := os.ReadFile(rep); !strings.Contains(string(b), "</html>") {
		t.Error("eval --overwrite did not write the report")
	}

	// A model with 5 inputs instead of 4: the checkpoint does not fit it.
	other := filepath.Join(root, "other")
	g := graph.New("wide", 17)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 5}})
	g.Dims["x"] = []string{"batch", ""}
	g.AddInitializer(graph.Float32s("w", []int64{5, 3}, make([]float32, 15)))
	g.AddInitializer(graph.Float32s("b", []int64{3}, make([]float32, 3)))
	b := graph.NewBuilder(g, "")
	b.OpInto("logits", "Add", []string{b.MatMul("x", "w"), "b"})
	g.Outputs = []string{"logits"}
	if _, err := artifacts.Build(artifacts.Options{Graph: g, Out: other, Loss: "cross_entropy"}); err != nil {
		t.Fatal(err)
	}
	otherCfg := filepath.Join(root, "other.toml")
	os.WriteFile(otherCfg, []byte(strings.Replace(body, "ART", other, 1)), 0o644)
	errOut.Reset()
	code := run([]string{"ortrain", "eval", "--checkpoint", version, "--config", otherCfg, "--out-dir", filepath.Join(root, "e2")}, &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), "does not match") || !strings.Contains(errOut.String(), "parameter w") {
		t.Errorf("checkpoint of another model: exit %d, %q; want 2 naming parameter w", code, errOut.String())
	}
}
